// Produces the batches of a sequence of batch ids, reading their tokens through io_uring
// ahead of the consumer: while the caller works on one batch, the reads of the next
// `depth` batches are in the kernel. Content depends on the batch id only (BatchIndex),
// never on the depth, the order of ids or timing.
//
// Thread safety: none; one thread owns a reader. A reader that threw is left unusable.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "data/batch_index.h"
#include "data/corpus.h"
#include "data/file_io.h"
#include "data/read_queue.h"
#include "data/token_batch.h"

namespace hsring::data {

// The next batch id to produce, or nullopt when there is none.
using BatchIdSource = std::function<std::optional<uint64_t>()>;

// first, first + stride, first + 2 stride, ... (count ids; 0: no end). Target t of T
// starting at shard position k reads strided_ids(k * T + t, T).
BatchIdSource strided_ids(uint64_t first, uint64_t stride, uint64_t count = 0);

struct ReaderOptions {
  uint32_t depth = 4;            // batches read ahead of the consumer
  uint32_t queue_capacity = 64;  // piece reads in the kernel at once
};

struct ReaderStats {
  uint64_t batches = 0;           // returned by next()
  uint64_t reads = 0;             // reads submitted: per piece, its tokens (and mask bytes)
  uint64_t bytes = 0;             // token and loss mask bytes read
  uint64_t ready_on_arrival = 0;  // next() found its batch already read: no wait
  uint32_t max_ahead = 0;         // most batches submitted and not yet returned
};

class TokenReader {
 public:
  // `corpus` and `index` must outlive the reader. Opens every shard file; throws
  // Error (I/O, bad options for depth 0).
  TokenReader(const Corpus& corpus, const BatchIndex& index, BatchIdSource ids,
              const ReaderOptions& options = {});
  ~TokenReader();

  // The next batch of the id source, or nullopt once it is exhausted. Throws Error
  // naming the shard file and byte for a failed or short read or a bad token.
  std::optional<TokenBatch> next();

  const ReaderStats& stats() const { return stats_; }
  bool uses_io_uring() const { return queue_->uses_io_uring(); }

 private:
  struct Pending {
    BatchRef ref;
    std::vector<PieceRead> reads;  // batch_reads(ref)
    std::vector<std::byte> raw;    // the reads' bytes, end to end; read into by the kernel
    uint32_t reads_left = 0;
  };
  void fill();
  void submit(uint64_t batch_id);
  void complete(const ReadResult& result);

  const Corpus& corpus_;
  const BatchIndex& index_;
  BatchIdSource ids_;
  ReaderOptions options_;
  std::vector<File> files_;
  std::deque<std::unique_ptr<Pending>> ahead_;  // submitted, in id-source order
  uint64_t head_seq_ = 0;                       // sequence number of ahead_.front()
  bool ids_done_ = false;
  ReaderStats stats_;
  // Last member: destroyed first, and its destructor waits for reads still writing into
  // ahead_'s buffers from files_.
  std::unique_ptr<ReadQueue> queue_;
};

}  // namespace hsring::data
