// The DFlash drafter's parameters as named tensors in one flat buffer (the ParamLayout of
// train/param_layout.h), and their deterministic initialisation. The embedding and the
// LM head are the target's, frozen: they are not parameters.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "train/dflash_config.h"
#include "train/param_layout.h"

namespace hsring::train {

// The layout of `config` (HF names, Linear weights [out, in]), in this order:
//   fc.weight [D, K*H], hidden_norm.weight [D], then for each layer i:
//   layers.i.input_layernorm.weight [D], layers.i.self_attn.{q,k,v,o}_proj.weight
//   ([heads*hd, D], [kv*hd, D], [kv*hd, D], [D, heads*hd]),
//   layers.i.self_attn.{q,k}_norm.weight [hd], layers.i.post_attention_layernorm.weight [D],
//   layers.i.mlp.{gate,up}_proj.weight [I, D], layers.i.mlp.down_proj.weight [D, I];
//   and last norm.weight [D]. Offsets are multiples of kParamAlignment; gaps are zero.
// REQUIRES: validate_dflash_config(config).empty().
ParamLayout dflash_param_layout(const DflashConfig& config);

// Where each draft layer's tensors start (train/param_layout.h), one entry per layer. REQUIRES:
// `layout` is dflash_param_layout of a `layers`-layer config.
std::vector<DrafterLayerOffsets> dflash_layer_offsets(const ParamLayout& layout, uint32_t layers);

// Whether every layer's q, k and v projections are adjacent (projections_adjacent).
bool dflash_projections_adjacent(const DflashConfig& c, const std::vector<DrafterLayerOffsets>& at);

// Fills `params` (layout.total elements), each tensor a pure function of (seed, name): norm
// weights 1, Linear weights uniform in +-1/sqrt(fan_in), gaps 0.
template <class Real>
void init_dflash_params(const ParamLayout& layout, uint64_t seed, std::span<Real> params);

}  // namespace hsring::train
