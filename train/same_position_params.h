// The same-position drafter's parameters as named tensors in one flat buffer: its layout
// table (HF names, shapes, offsets) that the model, the optimizer, gradient all-reduce and
// checkpoints share, and its deterministic initialisation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "train/param_layout.h"
#include "train/same_position_config.h"

namespace hsring::train {

// The layout of `config`, in this order (embed_tokens only when config.embed_tokens):
//   embed_tokens.weight [V, D], fc.weight [D, K*H], hidden_norm.weight [D],
//   layers.0.input_layernorm.weight [D], layers.0.self_attn.{q,k,v,o}_proj.weight,
//   layers.0.post_attention_layernorm.weight [D], layers.0.mlp.{gate,up,down}_proj.weight,
//   norm.weight [D], lm_head.weight [V, D].
// REQUIRES: validate_same_position_config(config).empty().
ParamLayout same_position_param_layout(const SamePositionConfig& config);

struct SamePositionInit {
  uint64_t seed = 0;
  // [V, D] copied into lm_head.weight (the target's LM head when D == H); empty: random.
  std::span<const float> lm_head;
};

// Fills `params` (layout.total elements): each tensor a pure function of (seed, name).
// Linear weights and lm_head uniform in +-1/sqrt(fan_in) (PyTorch's Linear default), norm
// weights 1, embed_tokens uniform with unit variance, gaps 0. Throws Error(kModel)
// when init.lm_head is neither empty nor V * D values.
template <class Real>
void init_same_position_params(const SamePositionConfig& config, const ParamLayout& layout,
                               const SamePositionInit& init, std::span<Real> params);

}  // namespace hsring::train
