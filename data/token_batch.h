// A batch as the ring slot carries it: int32 tokens, positions that restart in each
// sequence, cu_seqlens sequence offsets and next-token labels (-100 where a sequence
// ends). Each piece of the batch plan is one sequence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "data/batch_index.h"

namespace hsring::data {

class Corpus;

inline constexpr int32_t kIgnoreLabel = -100;

struct TokenBatch {
  uint64_t batch_id = 0;
  uint64_t epoch = 0;
  uint32_t length_bucket = 0;
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  std::vector<int32_t> doc_offsets;  // num_docs() + 1 entries, from 0 to token_count()
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

// The byte of its shard file where the tokens of `piece` start, and how many bytes.
uint64_t piece_file_offset(const Corpus& corpus, const Piece& piece);
uint64_t piece_bytes(const Corpus& corpus, const Piece& piece);

// Builds the batch of `ref` from `raw`: the pieces' token bytes as stored in their shards,
// laid end to end in piece order. Throws DataError(kBadToken) naming the shard and byte of
// a token outside its shard's vocabulary.
TokenBatch assemble_batch(const Corpus& corpus, const BatchRef& ref, const std::byte* raw);

// The batch `batch_id` read with blocking pread: the reference the io_uring reader must
// match, and a simple path for tools.
TokenBatch read_batch(const Corpus& corpus, const BatchIndex& index, uint64_t batch_id);

}  // namespace hsring::data
