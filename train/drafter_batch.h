// The batch every drafter trains on: packed documents of captured target states, their
// tokens, positions and labels (the CPU same-position and DFlash models, the CUDA trainers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/ignore_label.h"  // the labels' "ignored"

namespace hsring::train {

// One packed batch of documents; views, not owned.
struct DrafterBatch {
  std::span<const float> features;       // [T, K*H] row-major: the K captured layers of a token
  std::span<const int32_t> tokens;       // [T] input tokens (read only with embed_tokens)
  std::span<const int32_t> positions;    // [T] RoPE positions, >= 0
  std::span<const int32_t> doc_offsets;  // [D + 1] cu_seqlens: 0 = o_0 < ... < o_D = T
  std::span<const int32_t> labels;       // [T] target's greedy next token; < 0: ignored

  size_t rows() const { return tokens.size(); }
};

}  // namespace hsring::train
