#include "data/token_reader.h"

#include <cstring>

#include "common/error.h"
#include "common/syscheck.h"

namespace hsring::data {

BatchIdSource strided_ids(uint64_t first, uint64_t stride, uint64_t count) {
  return [next = first, stride, left = count,
          bounded = count != 0]() mutable -> std::optional<uint64_t> {
    if (bounded && left-- == 0) return std::nullopt;
    const uint64_t id = next;
    next += stride;
    return id;
  };
}

TokenReader::TokenReader(const Corpus& corpus, const BatchIndex& index, BatchIdSource ids,
                         const ReaderOptions& options)
    : corpus_(corpus), index_(index), ids_(std::move(ids)), options_(options) {
  if (options.depth == 0) throw Error(Errc::kData, "read-ahead depth must be > 0");
  files_.reserve(corpus.shards().size());
  for (const ShardInfo& shard : corpus.shards()) files_.push_back(File::open_read(shard.path));
  queue_ = std::make_unique<ReadQueue>(options.queue_capacity);
}

TokenReader::~TokenReader() = default;

void TokenReader::submit(uint64_t batch_id) {
  auto pending = std::make_unique<Pending>();
  pending->ref = index_.batch(batch_id);
  pending->reads = batch_reads(corpus_, pending->ref);
  uint64_t total = 0;
  for (const PieceRead& r : pending->reads) total += r.bytes;
  pending->raw.resize(total);
  pending->reads_left = uint32_t(pending->reads.size());
  // The tag names the batch (its sequence number, low 32 bits) and the read.
  const uint64_t seq = head_seq_ + ahead_.size();
  uint64_t at = 0;
  for (uint32_t i = 0; i < pending->reads.size(); ++i) {
    const PieceRead& r = pending->reads[i];
    queue_->read(files_[r.shard].fd(), pending->raw.data() + at, r.bytes, r.file_offset,
                 (seq << 32) | i);
    at += r.bytes;
    ++stats_.reads;
    stats_.bytes += r.bytes;
  }
  ahead_.push_back(std::move(pending));
  stats_.max_ahead = std::max(stats_.max_ahead, uint32_t(ahead_.size()));
}

void TokenReader::fill() {
  while (!ids_done_ && ahead_.size() < options_.depth) {
    const std::optional<uint64_t> id = ids_();
    if (!id) {
      ids_done_ = true;
      break;
    }
    submit(*id);
  }
  queue_->submit();
}

void TokenReader::complete(const ReadResult& r) {
  Pending& pending = *ahead_[uint32_t(r.tag >> 32) - uint32_t(head_seq_)];
  const PieceRead& read = pending.reads[uint32_t(r.tag)];
  const std::string& path = corpus_.shards()[read.shard].path;
  if (r.error != 0) throw sys_error(Errc::kData, r.error, path, r.stop_offset, "read");
  // The corpus was checked at open; a short read means the file changed since.
  if (r.ended_early)
    throw Error(Errc::kData, path, r.stop_offset,
                "file ends early: it was truncated after the corpus was opened");
  --pending.reads_left;
}

std::optional<TokenBatch> TokenReader::next() {
  fill();
  if (ahead_.empty()) return std::nullopt;
  // Take whatever has finished without waiting, to tell a batch that was read ahead
  // from one the consumer has to wait for.
  while (std::optional<ReadResult> r = queue_->poll(false)) complete(*r);
  if (ahead_.front()->reads_left == 0) ++stats_.ready_on_arrival;
  while (ahead_.front()->reads_left > 0) {
    const std::optional<ReadResult> r = queue_->poll(true);
    if (!r) throw Error(Errc::kData, "read queue lost a read (internal error)");
    complete(*r);
  }

  std::unique_ptr<Pending> head = std::move(ahead_.front());
  ahead_.pop_front();
  ++head_seq_;
  fill();  // keep `depth` batches in the kernel while the caller works on this one
  ++stats_.batches;
  return assemble_batch(corpus_, head->ref, head->raw.data());
}

}  // namespace hsring::data
