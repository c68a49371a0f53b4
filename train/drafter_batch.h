// The batch every drafter trains on: packed documents of captured target states, their
// tokens, positions and labels (the CPU same-position and DFlash models, the CUDA trainers),
// and the checks of it that every drafter makes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

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

// The checks every drafter makes of a batch, written once so that the same-position and the
// DFlash models refuse the same batch with the same words. Each throws Error(kModel) whose
// message starts with `batch_name` ("drafter batch", "dflash batch") and names the first
// problem.

// The metadata, features unread: an empty batch, a position or a label count that is not
// the token count, bad document offsets, a negative position, a label >= vocab_size
// (negative labels are ignored) and, with check_tokens, a token outside [0, vocab_size).
void validate_batch_metadata(const DrafterBatch& batch, uint32_t vocab_size, bool check_tokens,
                             std::string_view batch_name);
// The features: feature_dim (K * H) values per token. An empty batch passes here; the
// metadata check refuses it.
void validate_batch_features(const DrafterBatch& batch, uint32_t feature_dim,
                             std::string_view batch_name);

}  // namespace hsring::train
