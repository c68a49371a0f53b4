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
// row a. labels[t] is the token at position t + 1 (the data's next token, or the target's
// greedy one, as the run chose); position j of the block stands at position positions[a] + j, so it
// is scored against labels[a + j - 1]: the very token the target checks it against when it verifies
// the block (its argmax at row a + j - 1).
constexpr size_t dflash_label_row(size_t anchor, size_t j) { return anchor + j - 1; }

// Whether row a may anchor a block in the document [s, e) at all: it lies inside it, with
// at least one context row before it (s < a < e). The block itself may run past the
// document's end: its positions there are not scored (dflash_block_label).
constexpr bool anchor_in_document(int64_t a, int64_t s, int64_t e) { return s < a && a < e; }

// The label block position j (1 <= j < B) of the block anchored at row a of the document
// [s, e) is scored against: labels[dflash_label_row(a, j)], or ignored (-1) where that row
// lies past the document's end (a block cut off by it).
inline int32_t dflash_block_label(std::span<const int32_t> labels, size_t anchor, size_t j,
                                  size_t document_end) {
  const size_t row = dflash_label_row(anchor, j);
  return row < document_end ? labels[row] : -1;
}

// The rows that can anchor a block, ascending, by the published rule (SpecForge's DFlash
// objective, as in DFlash's training): the anchor's own token and the token after it are
// both trained, i.e. labels[a - 1] >= 0 (the token at row a is a counted label) and
// labels[a] >= 0, with anchor_in_document. So no block starts inside a prompt, whose
// tokens the target never drafts from, and a response's last trained tokens anchor blocks
// that the document's end cuts off. A loss mask is expressed as ignored (negative)
// labels. Throws Error(kModel) when doc_offsets is not 0 = o_0 < ... < o_D =
// labels.size() or block_size < 2.
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
