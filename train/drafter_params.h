// The drafter's parameters as named tensors in one flat buffer: the layout table (HF names,
// shapes, offsets) that the model, the optimizer, gradient all-reduce and checkpoints share,
// and the deterministic initialisation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "train/drafter_config.h"
#include "train/param_layout.h"

namespace hsring::train {

// The layout of `config`, in this order (embed_tokens only when config.embed_tokens):
//   embed_tokens.weight [V, D], fc.weight [D, K*H], hidden_norm.weight [D],
//   layers.0.input_layernorm.weight [D], layers.0.self_attn.{q,k,v,o}_proj.weight,
//   layers.0.post_attention_layernorm.weight [D], layers.0.mlp.{gate,up,down}_proj.weight,
//   norm.weight [D], lm_head.weight [V, D].
// REQUIRES: validate_drafter_config(config).empty().
ParamLayout drafter_param_layout(const DrafterConfig& config);

struct DrafterInit {
  uint64_t seed = 0;
  // [V, D] copied into lm_head.weight (the target's LM head when D == H); empty: random.
  std::span<const float> lm_head;
};

// Fills `params` (layout.total elements): each tensor a pure function of (seed, name).
// Linear weights and lm_head uniform in +-1/sqrt(fan_in) (PyTorch's Linear default), norm
// weights 1, embed_tokens uniform with unit variance, gaps 0. Throws Error(kModel)
// when init.lm_head is neither empty nor V * D values.
template <class Real>
void init_drafter_params(const DrafterConfig& config, const ParamLayout& layout,
                         const DrafterInit& init, std::span<Real> params);

// The default initialisation of one tensor (t.size values at data), a pure function of
// (seed, t.name): 1 for a norm weight (1-D), uniform in +-1/sqrt(fan_in) for a Linear
// weight [out, in]. Every drafter layout initialises its ordinary tensors with this.
template <class Real>
void init_param_tensor(const ParamInfo& t, uint64_t seed, Real* data);

}  // namespace hsring::train
