#include "train/param_layout.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"
#include "common/random.h"

namespace hsring::train {

const ParamInfo* ParamLayout::find(std::string_view name) const {
  for (const ParamInfo& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const ParamInfo& ParamLayout::at(std::string_view name) const {
  if (const ParamInfo* t = find(name)) return *t;
  throw Error(Errc::kModel, "the drafter has no parameter '" + std::string(name) + "'");
}

void ParamLayout::add(std::string name, std::vector<int64_t> shape) {
  ParamInfo t;
  t.name = std::move(name);
  t.size = 1;
  for (int64_t d : shape) t.size *= size_t(d);
  t.weight_decay = shape.size() > 1;
  t.shape = std::move(shape);
  t.offset = (total + kParamAlignment - 1) / kParamAlignment * kParamAlignment;
  total = t.offset + t.size;
  tensors.push_back(std::move(t));
}

DrafterLayerOffsets drafter_layer_offsets(const ParamLayout& layout, uint32_t layer) {
  const std::string p = "layers." + std::to_string(layer) + ".";
  const auto offset = [&](const char* name) { return layout.at(p + name).offset; };
  const auto optional = [&](const char* name) {
    const ParamInfo* t = layout.find(p + name);
    return t ? t->offset : 0;
  };
  DrafterLayerOffsets o;
  o.input_norm = offset("input_layernorm.weight");
  o.q = offset("self_attn.q_proj.weight");
  o.k = offset("self_attn.k_proj.weight");
  o.v = offset("self_attn.v_proj.weight");
  o.o = offset("self_attn.o_proj.weight");
  o.q_norm = optional("self_attn.q_norm.weight");
  o.k_norm = optional("self_attn.k_norm.weight");
  o.post_norm = offset("post_attention_layernorm.weight");
  o.gate = offset("mlp.gate_proj.weight");
  o.up = offset("mlp.up_proj.weight");
  o.down = offset("mlp.down_proj.weight");
  return o;
}

bool projections_adjacent(const DrafterLayerOffsets& o, size_t q_dim, size_t kv_dim, size_t width) {
  return o.k == o.q + q_dim * width && o.v == o.k + kv_dim * width;
}

template <class Real>
void init_param_tensor(const ParamInfo& t, uint64_t seed, Real* data) {
  if (t.shape.size() == 1) {
    std::fill(data, data + t.size, Real(1));
    return;
  }
  uint64_t state = name_key(seed, t.name);
  const float bound = 1.0f / std::sqrt(float(t.shape[1]));
  for (size_t i = 0; i < t.size; ++i) data[i] = Real(bound * signed_unit(splitmix64(state)));
}

template void init_param_tensor(const ParamInfo&, uint64_t, float*);
template void init_param_tensor(const ParamInfo&, uint64_t, double*);

}  // namespace hsring::train
