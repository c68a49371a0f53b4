#include "data/batch_index.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <map>
#include <numeric>

#include "common/error.h"
#include "common/random.h"
#include "data/corpus.h"
#include "data/permutation.h"

namespace hsring::data {

namespace {

constexpr uint64_t kShuffleSalt = 0x5049454345530001ull;  // "PIECES"
constexpr uint64_t kEpochSalt = 0x45504F4348000001ull;    // "EPOCH"

std::vector<std::vector<uint64_t>> offsets_of(const Corpus& corpus) {
  std::vector<std::vector<uint64_t>> out;
  out.reserve(corpus.shards().size());
  for (const ShardInfo& s : corpus.shards()) out.push_back(s.doc_offsets);
  return out;
}

}  // namespace

BatchIndex::BatchIndex(const Corpus& corpus, const PackOptions& options)
    : BatchIndex(offsets_of(corpus), options) {}

BatchIndex::BatchIndex(const std::vector<std::vector<uint64_t>>& doc_offsets,
                       const PackOptions& options)
    : options_(options) {
  if (options.max_tokens == 0 || options.max_tokens > kMaxBatchTokens)
    throw Error(Errc::kData,
                fmt::format("max tokens per batch must be in [1, {}]", kMaxBatchTokens));
  if (options.window == 0) throw Error(Errc::kData, "packing window must be > 0");
  // Documents longer than the budget become consecutive pieces of at most max_tokens;
  // empty documents have nothing to train on and are dropped.
  std::vector<Piece> pieces;
  for (uint32_t s = 0; s < doc_offsets.size(); ++s) {
    const std::vector<uint64_t>& off = doc_offsets[s];
    for (size_t d = 0; d + 1 < off.size(); ++d) {
      for (uint64_t b = off[d]; b < off[d + 1]; b += options.max_tokens) {
        const auto length = uint32_t(std::min<uint64_t>(options.max_tokens, off[d + 1] - b));
        pieces.push_back(Piece{s, length, b});
        token_count_ += length;
      }
    }
  }
  if (pieces.empty()) throw Error(Errc::kData, "the corpus has no token to pack");
  if (pieces.size() >= UINT32_MAX)  // packing indexes pieces with uint32
    throw Error(Errc::kData, "too many pieces: raise max tokens per batch");
  // One seeded Fisher-Yates shuffle, so a batch mixes documents from across the corpus.
  uint64_t rng = mix64(options.seed ^ kShuffleSalt);
  for (size_t i = pieces.size() - 1; i > 0; --i)
    std::swap(pieces[i], pieces[splitmix64(rng) % (i + 1)]);
  pack(std::move(pieces));
}

void BatchIndex::pack(std::vector<Piece> pieces) {
  const uint32_t budget = options_.max_tokens;
  batch_begin_.assign(1, 0);
  pieces_.reserve(pieces.size());
  std::vector<uint32_t> order;
  std::vector<std::vector<uint32_t>> batches;  // of one window: indexes into `pieces`
  for (size_t w = 0; w < pieces.size(); w += options_.window) {
    const size_t end = std::min(pieces.size(), w + options_.window);
    order.resize(end - w);
    std::iota(order.begin(), order.end(), uint32_t(w));
    // Best-fit decreasing: longest first, each into the fullest batch it fits. Ties break
    // on the shuffled position, and multimap keeps equal keys in insertion order, so the
    // packing is a pure function of the pieces.
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return pieces[a].length > pieces[b].length; });
    batches.clear();
    std::multimap<uint32_t, uint32_t> room;  // tokens left -> batch
    for (uint32_t p : order) {
      const uint32_t length = pieces[p].length;
      auto fit = room.lower_bound(length);
      uint32_t batch;
      uint32_t left;
      if (fit == room.end()) {
        batch = uint32_t(batches.size());
        batches.emplace_back();
        left = budget - length;
      } else {
        batch = fit->second;
        left = fit->first - length;
        room.erase(fit);
      }
      batches[batch].push_back(p);
      if (left > 0) room.emplace(left, batch);
    }
    for (std::vector<uint32_t>& batch : batches) {
      std::sort(batch.begin(), batch.end());  // sequences in shuffled order, not by length
      for (uint32_t p : batch) pieces_.push_back(pieces[p]);
      batch_begin_.push_back(pieces_.size());
    }
  }
}

std::span<const Piece> BatchIndex::pieces_of(uint64_t index) const {
  return std::span<const Piece>(pieces_).subspan(batch_begin_[index],
                                                 batch_begin_[index + 1] - batch_begin_[index]);
}

uint64_t BatchIndex::batch_at(uint64_t epoch, uint64_t position) const {
  return permute_index(position, batches_per_epoch(),
                       mix64(options_.seed ^ mix64(epoch ^ kEpochSalt)));
}

uint32_t BatchIndex::length_bucket(uint32_t longest, uint32_t max_tokens) {
  if (longest == 0) return 0;
  const uint32_t halvings = uint32_t(std::bit_width(std::max(1u, max_tokens / longest))) - 1;
  return kLengthBuckets - 1 - std::min(kLengthBuckets - 1, halvings);
}

BatchRef BatchIndex::batch(uint64_t batch_id) const {
  BatchRef ref;
  ref.batch_id = batch_id;
  ref.epoch = batch_id / batches_per_epoch();
  ref.index = batch_at(ref.epoch, batch_id % batches_per_epoch());
  ref.pieces = pieces_of(ref.index);
  uint32_t longest = 0;
  for (const Piece& p : ref.pieces) {
    ref.token_count += p.length;
    longest = std::max(longest, p.length);
  }
  ref.length_bucket = length_bucket(longest, options_.max_tokens);
  return ref;
}

}  // namespace hsring::data
