// Which tokens make batch id X: a deterministic plan computed from the corpus's document
// table alone. Documents are cut into pieces of at most max_tokens, the pieces shuffled
// once (seeded) and packed to the token budget; each epoch visits those batches in its own
// seeded order, and batch ids past one epoch continue into the next. So batch X is a pure
// function of (corpus, options, X): a target restarted at X produces the same tokens.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace hsring::data {

class Corpus;

inline constexpr uint32_t kLengthBuckets = 8;
inline constexpr uint32_t kMaxBatchTokens = 1u << 28;

struct PackOptions {
  uint32_t max_tokens = 512;  // token budget of a batch
  uint64_t seed = 0;          // the piece shuffle and every epoch's order derive from it
  uint32_t window = 4096;     // pieces packed together (best-fit decreasing) per window
};

// Tokens [begin, begin + length) of shard `shard`, one sequence of a batch.
struct Piece {
  uint32_t shard;
  uint32_t length;
  uint64_t begin;
};

struct BatchRef {
  uint64_t batch_id = 0;
  uint64_t epoch = 0;
  uint64_t index = 0;  // which of the epoch's batches (epoch-independent numbering)
  std::span<const Piece> pieces;
  uint32_t token_count = 0;
  uint32_t length_bucket = 0;  // see length_bucket()
};

class BatchIndex {
 public:
  // `doc_offsets[s]` is shard s's offset table (cu_seqlens style). Throws
  // Error (bad options) for a zero budget or window, empty corpus without tokens.
  BatchIndex(const std::vector<std::vector<uint64_t>>& doc_offsets, const PackOptions& options);
  BatchIndex(const Corpus& corpus, const PackOptions& options);

  const PackOptions& options() const { return options_; }
  uint64_t batches_per_epoch() const { return batch_begin_.size() - 1; }
  uint64_t token_count() const { return token_count_; }  // per epoch: every corpus token

  // The batch with id `batch_id`; any id is valid (ids wrap into later epochs).
  BatchRef batch(uint64_t batch_id) const;
  // The pieces of the epoch-independent batch `index` < batches_per_epoch().
  std::span<const Piece> pieces_of(uint64_t index) const;

  // Which of the epoch's batches position `position` of epoch `epoch` is: a seeded
  // bijection of [0, batches_per_epoch()).
  uint64_t batch_at(uint64_t epoch, uint64_t position) const;

  // The length bucket of a batch whose longest sequence has `longest` tokens: 7 for
  // (budget/2, budget], 6 for (budget/4, budget/2], ..., 0 for the shortest. Longest,
  // since the attention cost of a packed batch grows with its longest sequence.
  static uint32_t length_bucket(uint32_t longest, uint32_t max_tokens);

 private:
  void pack(std::vector<Piece> pieces);

  PackOptions options_;
  std::vector<Piece> pieces_;          // every batch's pieces, batch after batch
  std::vector<uint64_t> batch_begin_;  // batch i is pieces_[batch_begin_[i], [i+1])
  uint64_t token_count_ = 0;
};

}  // namespace hsring::data
