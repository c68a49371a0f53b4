#include "train/same_position_params.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/contract.h"
#include "common/error.h"
#include "common/random.h"

namespace hsring::train {

ParamLayout same_position_param_layout(const SamePositionConfig& c) {
  HSRING_REQUIRE(validate_same_position_config(c).empty());
  ParamLayout layout;
  const int64_t d = c.width, v = c.vocab_size, inter = c.intermediate_size;
  const int64_t q = c.q_dim(), kv = c.kv_dim();
  if (c.embed_tokens) layout.add("embed_tokens.weight", {v, d});
  layout.add("fc.weight", {d, int64_t(c.feature_dim())});
  layout.add("hidden_norm.weight", {d});
  layout.add("layers.0.input_layernorm.weight", {d});
  layout.add("layers.0.self_attn.q_proj.weight", {q, d});
  layout.add("layers.0.self_attn.k_proj.weight", {kv, d});
  layout.add("layers.0.self_attn.v_proj.weight", {kv, d});
  layout.add("layers.0.self_attn.o_proj.weight", {d, q});
  layout.add("layers.0.post_attention_layernorm.weight", {d});
  layout.add("layers.0.mlp.gate_proj.weight", {inter, d});
  layout.add("layers.0.mlp.up_proj.weight", {inter, d});
  layout.add("layers.0.mlp.down_proj.weight", {d, inter});
  layout.add("norm.weight", {d});
  layout.add("lm_head.weight", {v, d});
  layout.total = (layout.total + kParamAlignment - 1) / kParamAlignment * kParamAlignment;
  return layout;
}

template <class Real>
void init_same_position_params(const SamePositionConfig& config, const ParamLayout& layout,
                               const SamePositionInit& init, std::span<Real> params) {
  std::fill(params.begin(), params.end(), Real(0));
  for (const ParamInfo& t : layout.tensors) {
    Real* data = params.data() + t.offset;
    uint64_t state = name_key(init.seed, t.name);
    if (t.name == "lm_head.weight" && !init.lm_head.empty()) {
      if (init.lm_head.size() != t.size)
        throw Error(
            Errc::kModel,
            fmt::format("lm_head init holds {} values, the drafter's [{}, {}] head needs {}",
                        init.lm_head.size(), config.vocab_size, config.width, t.size));
      std::copy(init.lm_head.begin(), init.lm_head.end(), data);
    } else if (t.name == "embed_tokens.weight") {
      for (size_t i = 0; i < t.size; ++i)
        data[i] = Real(1.7320508f * signed_unit(splitmix64(state)));
    } else {
      init_param_tensor(t, init.seed, data);
    }
  }
}

template void init_same_position_params(const SamePositionConfig&, const ParamLayout&,
                                        const SamePositionInit&, std::span<float>);
template void init_same_position_params(const SamePositionConfig&, const ParamLayout&,
                                        const SamePositionInit&, std::span<double>);

}  // namespace hsring::train
