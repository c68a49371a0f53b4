// A batch as the ring slot carries it: int32 tokens, positions that restart in each
// sequence, cu_seqlens sequence offsets and next-token labels (-100 where a sequence
// ends, and where the next token is masked out by its shard's loss mask). Each piece of
// the batch plan is one sequence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/ignore_label.h"
#include "data/batch_index.h"

namespace hsring::data {

class Corpus;

struct TokenBatch {
  uint64_t batch_id = 0;
  uint64_t epoch = 0;
  uint32_t length_bucket = 0;
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  std::vector<int32_t> doc_offsets;  // num_docs() + 1 entries, from 0 to token_count()
  // labels[t]: tokens[t + 1] when t + 1 is in t's sequence and counts (the loss mask), else
  // kIgnoreLabel.
  std::vector<int32_t> labels;

  uint32_t token_count() const { return uint32_t(tokens.size()); }
  uint32_t num_docs() const { return uint32_t(doc_offsets.size()) - 1; }
  bool operator==(const TokenBatch&) const = default;
};

// Copies `batch` into the four arrays of a ring slot (SlotLayout: tokens, positions,
// labels: max_tokens entries; doc_offsets: max_tokens + 1). Returns false, copying
// nothing, if the batch has more than `max_tokens` tokens.
bool copy_to_slot_arrays(const TokenBatch& batch, uint32_t max_tokens, int32_t* tokens,
                         int32_t* positions, int32_t* doc_offsets, int32_t* labels);

// Applies the loss mask that `batch`'s labels carry to a row of target labels (the slot's
// labels row, the target's greedy tokens): labels[t] becomes kIgnoreLabel wherever t + 1
// is in t's sequence and batch.labels[t] is kIgnoreLabel, i.e. the next token is masked
// out. The last row of each sequence is left as it is. A batch of unmasked shards changes
// nothing. REQUIRES: `labels` has batch.token_count() entries.
void mask_target_labels(const TokenBatch& batch, int32_t* labels);
// True when mask_target_labels would change some label of `batch` (its loss mask leaves a
// next token out).
bool masks_any_label(const TokenBatch& batch);

// One read of a batch's bytes: `bytes` bytes at `file_offset` of shard `shard`.
struct PieceRead {
  uint32_t shard = 0;
  uint64_t file_offset = 0;
  uint32_t bytes = 0;
};

// The reads that fetch the bytes of `ref`, in the order assemble_batch() takes them laid
// end to end: each piece's tokens, then, for each piece whose shard has a loss mask, the
// mask bytes that hold its tokens' bits.
std::vector<PieceRead> batch_reads(const Corpus& corpus, const BatchRef& ref);

// Builds the batch of `ref` from `raw`: the bytes of batch_reads(corpus, ref), end to end.
// Throws Error (bad token) naming the shard and byte of a token outside its shard's
// vocabulary.
TokenBatch assemble_batch(const Corpus& corpus, const BatchRef& ref, const std::byte* raw);

// The batch of `ref` (or of `batch_id`) read with blocking pread: the reference the
// io_uring reader must match, and a simple path for tools.
TokenBatch read_batch(const Corpus& corpus, const BatchRef& ref);
TokenBatch read_batch(const Corpus& corpus, const BatchIndex& index, uint64_t batch_id);

}  // namespace hsring::data
