#include "train/drafter_params.h"

#include <algorithm>
#include <cmath>

#include "common/contract.h"
#include "common/error.h"
#include "common/random.h"

namespace hsring::train {

namespace {

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

// Uniform in [-1, 1) from the top 24 bits: exact in fp32, the same on every machine.
float unit_uniform(uint64_t& state) {
  return float(int64_t(splitmix64(state) >> 40) - (1 << 23)) / float(1 << 23);
}

}  // namespace

ParamLayout drafter_param_layout(const DrafterConfig& c) {
  HSRING_REQUIRE(validate_drafter_config(c).empty());
  ParamLayout layout;
  const auto add = [&layout](std::string name, std::vector<int64_t> shape) {
    layout.add(std::move(name), std::move(shape));
  };
  const int64_t d = c.width, v = c.vocab_size, inter = c.intermediate_size;
  const int64_t q = c.q_dim(), kv = c.kv_dim();
  if (c.embed_tokens) add("embed_tokens.weight", {v, d});
  add("fc.weight", {d, int64_t(c.feature_dim())});
  add("hidden_norm.weight", {d});
  add("layers.0.input_layernorm.weight", {d});
  add("layers.0.self_attn.q_proj.weight", {q, d});
  add("layers.0.self_attn.k_proj.weight", {kv, d});
  add("layers.0.self_attn.v_proj.weight", {kv, d});
  add("layers.0.self_attn.o_proj.weight", {d, q});
  add("layers.0.post_attention_layernorm.weight", {d});
  add("layers.0.mlp.gate_proj.weight", {inter, d});
  add("layers.0.mlp.up_proj.weight", {inter, d});
  add("layers.0.mlp.down_proj.weight", {d, inter});
  add("norm.weight", {d});
  add("lm_head.weight", {v, d});
  layout.total = (layout.total + kParamAlignment - 1) / kParamAlignment * kParamAlignment;
  return layout;
}

template <class Real>
void init_drafter_params(const DrafterConfig& config, const ParamLayout& layout,
                         const DrafterInit& init, std::span<Real> params) {
  std::fill(params.begin(), params.end(), Real(0));
  for (const ParamInfo& t : layout.tensors) {
    Real* data = params.data() + t.offset;
    uint64_t state = mix64(init.seed ^ fnv1a(t.name));
    if (t.name == "lm_head.weight" && !init.lm_head.empty()) {
      if (init.lm_head.size() != t.size)
        throw Error(Errc::kModel,
                    "lm_head init holds " + std::to_string(init.lm_head.size()) +
                        " values, the drafter's [" + std::to_string(config.vocab_size) + ", " +
                        std::to_string(config.width) + "] head needs " + std::to_string(t.size));
      std::copy(init.lm_head.begin(), init.lm_head.end(), data);
    } else if (t.name == "embed_tokens.weight") {
      for (size_t i = 0; i < t.size; ++i) data[i] = Real(1.7320508f * unit_uniform(state));
    } else {
      init_param_tensor(t, init.seed, data);
    }
  }
}

template <class Real>
void init_param_tensor(const ParamInfo& t, uint64_t seed, Real* data) {
  if (t.shape.size() == 1) {
    std::fill(data, data + t.size, Real(1));
    return;
  }
  uint64_t state = mix64(seed ^ fnv1a(t.name));
  const float bound = 1.0f / std::sqrt(float(t.shape[1]));
  for (size_t i = 0; i < t.size; ++i) data[i] = Real(bound * unit_uniform(state));
}

template void init_drafter_params(const DrafterConfig&, const ParamLayout&, const DrafterInit&,
                                  std::span<float>);
template void init_drafter_params(const DrafterConfig&, const ParamLayout&, const DrafterInit&,
                                  std::span<double>);
template void init_param_tensor(const ParamInfo&, uint64_t, float*);
template void init_param_tensor(const ParamInfo&, uint64_t, double*);

}  // namespace hsring::train
