// Where the DFlash drafter's training blocks go: the rule that makes a row a valid anchor,
// random anchor sampling (deterministic in a seed), which data row scores each block
// position, and the teacher-forced acceptance of one block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace hsring::train {

// The data row whose label scores block position j (1 <= j < B) of the block anchored at
// row a. labels[t] is the target's greedy next token after row t, the token it would put at
// position t + 1; position j of the block stands at position positions[a] + j, so it is
// scored against labels[a + j - 1]: the very token the target checks it against when it
// verifies the block (its argmax at row a + j - 1).
constexpr size_t dflash_label_row(size_t anchor, size_t j) { return anchor + j - 1; }

// Whether row a of the document [s, e) leaves room for a block of block_size rows: at least
// one context row before it (s < a) and the block inside the document (a + B - 1 < e).
constexpr bool anchor_fits(int64_t a, int64_t s, int64_t e, uint32_t block_size) {
  return s < a && a + int64_t(block_size) - 1 < e;
}

// The rows that can anchor a block, ascending: anchor_fits, and at least one counted label
// (>= 0) among the rows that score it, dflash_label_row(a, 1 .. B - 1) = a .. a + B - 2. A
// loss mask is expressed as ignored (negative) labels. Throws Error(kBadInput) when
// doc_offsets is not 0 = o_0 < ... < o_D = labels.size() or block_size < 2.
std::vector<int32_t> anchor_candidates(std::span<const int32_t> doc_offsets,
                                       std::span<const int32_t> labels, uint32_t block_size);

// `count` distinct anchors drawn uniformly from anchor_candidates (all of them when there are
// no more than `count`), ascending; a pure function of the arguments. Throws like
// anchor_candidates.
std::vector<int32_t> sample_anchors(std::span<const int32_t> doc_offsets,
                                    std::span<const int32_t> labels, uint32_t block_size,
                                    size_t count, uint64_t seed);

// Anchors per batch: 512 at 16384 tokens, in proportion to the batch's tokens (T / 32),
// at least 1.
size_t default_anchor_count(size_t tokens);

// Teacher-forced acceptance of one block: labels[i] and predictions[i] (argmax) of block
// position i + 1. The number of leading positions whose prediction equals a counted label,
// stopping at the first mismatch or ignored (negative) label. REQUIRES equal lengths.
size_t accepted_prefix(std::span<const int32_t> labels, std::span<const int32_t> predictions);

}  // namespace hsring::train
