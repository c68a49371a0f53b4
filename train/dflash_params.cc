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

std::vector<DflashLayerOffsets> dflash_layer_offsets(const ParamLayout& layout, uint32_t layers) {
  std::vector<DflashLayerOffsets> out(layers);
  for (uint32_t i = 0; i < layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    const auto offset = [&](const char* name) { return layout.at(p + name).offset; };
    DflashLayerOffsets& o = out[i];
    o.input_norm = offset("input_layernorm.weight");
    o.q = offset("self_attn.q_proj.weight");
    o.k = offset("self_attn.k_proj.weight");
    o.v = offset("self_attn.v_proj.weight");
    o.o = offset("self_attn.o_proj.weight");
    o.q_norm = offset("self_attn.q_norm.weight");
    o.k_norm = offset("self_attn.k_norm.weight");
    o.post_norm = offset("post_attention_layernorm.weight");
    o.gate = offset("mlp.gate_proj.weight");
    o.up = offset("mlp.up_proj.weight");
    o.down = offset("mlp.down_proj.weight");
  }
  return out;
}

bool dflash_projections_adjacent(const DflashConfig& c, const std::vector<DflashLayerOffsets>& at) {
  const size_t d = c.width();
  return std::all_of(at.begin(), at.end(), [&](const DflashLayerOffsets& o) {
    return o.k == o.q + c.q_dim() * d && o.v == o.k + c.kv_dim() * d;
  });
}

}  // namespace hsring::train
