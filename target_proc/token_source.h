// The token half of a model target: the corpus, the deterministic batch index over it and
// the io_uring read-ahead, answering "which tokens are batch X" (plan) and "give me batch
// X's tokens" (fetch). Shared by the CPU and GPU model targets.
//
// Thread safety: none; the target thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/batch_index.h"
#include "data/corpus.h"
#include "data/token_batch.h"
#include "data/token_reader.h"
#include "model/model_config.h"
#include "worker/synthetic_batch.h"

namespace hsring {

struct TokenSourceOptions {
  std::string data_dir;      // token shards; "" = the built-in corpus
  uint64_t data_seed = 0;    // the packing shuffle and every epoch's order
  uint32_t read_ahead = 4;   // batches whose reads are in flight ahead of the forward
  uint64_t data_offset = 0;  // batch id X reads data batch X + data_offset (RingShape) ...
  // ... of this node's share: across machines (--nnodes) node R reads every nnodes-th
  // data batch from R, so no two machines train on the same batch.
  uint32_t nnodes = 1;
  uint32_t node_rank = 0;
};

class TokenSource {
 public:
  // Opens the corpus (headers and offset tables) and plans batches of up to `max_tokens`.
  // Target `target` of `num_targets` reads ahead along its own shard of batch ids. Throws
  // Error for a missing or corrupt corpus, Error when a shard's vocabulary
  // exceeds `model`'s.
  TokenSource(const TokenSourceOptions& options, const ModelConfig& model, uint32_t max_tokens,
              uint32_t target, uint32_t num_targets);
  ~TokenSource();

  BatchPlan plan(uint64_t batch_id) const;
  // Batch `batch_id`'s tokens: from the read-ahead when it is this target's next one, else
  // by a direct read (an adopted batch). The same bytes either way. Throws Error.
  data::TokenBatch fetch(uint64_t batch_id);

  const data::ReaderStats* reader_stats() const;

 private:
  // The corpus batch that ring batch `batch_id` carries.
  uint64_t data_id(uint64_t batch_id) const;

  TokenSourceOptions options_;
  data::Corpus corpus_;
  data::BatchIndex index_;
  const uint32_t target_, num_targets_;
  std::unique_ptr<data::TokenReader> reader_;  // started at the first batch of our shard
  uint64_t reader_next_ = 0;                   // the batch id reader_->next() returns
};

}  // namespace hsring
