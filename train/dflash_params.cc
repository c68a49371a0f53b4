#include "train/dflash_params.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace hsring::train {

ParamLayout dflash_param_layout(const DflashConfig& c) {
  ParamLayout layout;
  const int64_t d = c.width(), inter = c.intermediate_size, hd = c.head_dim;
  const int64_t q = c.q_dim(), kv = c.kv_dim();
  layout.add("fc.weight", {d, int64_t(c.feature_dim())});
  layout.add("hidden_norm.weight", {d});
  for (uint32_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    layout.add(p + "input_layernorm.weight", {d});
    layout.add(p + "self_attn.q_proj.weight", {q, d});
    layout.add(p + "self_attn.k_proj.weight", {kv, d});
    layout.add(p + "self_attn.v_proj.weight", {kv, d});
    layout.add(p + "self_attn.o_proj.weight", {d, q});
    layout.add(p + "self_attn.q_norm.weight", {hd});
    layout.add(p + "self_attn.k_norm.weight", {hd});
    layout.add(p + "post_attention_layernorm.weight", {d});
    layout.add(p + "mlp.gate_proj.weight", {inter, d});
    layout.add(p + "mlp.up_proj.weight", {inter, d});
    layout.add(p + "mlp.down_proj.weight", {d, inter});
  }
  layout.add("norm.weight", {d});
  layout.total = (layout.total + kParamAlignment - 1) / kParamAlignment * kParamAlignment;
  return layout;
}

template <class Real>
void init_dflash_params(const ParamLayout& layout, uint64_t seed, std::span<Real> params) {
  std::fill(params.begin(), params.end(), Real(0));
  for (const ParamInfo& t : layout.tensors) init_param_tensor(t, seed, params.data() + t.offset);
}

template void init_dflash_params(const ParamLayout&, uint64_t, std::span<float>);
template void init_dflash_params(const ParamLayout&, uint64_t, std::span<double>);

std::vector<DrafterLayerOffsets> dflash_layer_offsets(const ParamLayout& layout, uint32_t layers) {
  std::vector<DrafterLayerOffsets> out(layers);
  for (uint32_t i = 0; i < layers; ++i) out[i] = drafter_layer_offsets(layout, i);
  return out;
}

bool dflash_projections_adjacent(const DflashConfig& c,
                                 const std::vector<DrafterLayerOffsets>& at) {
  return std::all_of(at.begin(), at.end(), [&](const DrafterLayerOffsets& o) {
    return projections_adjacent(o, c.q_dim(), c.kv_dim(), c.width());
  });
}

}  // namespace hsring::train
