#include "model/model_weights.h"

#include <fmt/format.h>

#include <cmath>

#include "common/contract.h"
#include "common/random.h"
#include "model/safetensors.h"

namespace hsring {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Sizes the layers, and the experts of each mixture, to `c` (tensors left empty).
void size_layers(const ModelConfig& c, ModelWeights& w) {
  w.layers.resize(c.num_layers);
  for (uint32_t i = 0; i < c.num_layers; ++i)
    if (c.mlp_kind(i) == MlpKind::kExperts) w.layers[i].moe.experts.resize(c.moe.num_experts);
}

// Calls fn(name, shape, tensor) for every tensor `c` needs, in checkpoint order. W is
// ModelWeights or const ModelWeights. REQUIRES: w is sized as size_layers sizes it.
template <class W, class Fn>
void visit_weights(const ModelConfig& c, W& w, Fn&& fn) {
  const int64_t h = c.hidden_size;
  const int64_t inter = c.intermediate_size;
  const int64_t q = c.q_dim();
  const int64_t kv = c.kv_dim();
  const std::string& root = c.weight_prefix;
  const DeltaNetShape& d = c.delta_net;
  fn(root + "embed_tokens.weight", std::vector<int64_t>{c.vocab_size, h}, w.embed_tokens);
  for (uint32_t i = 0; i < c.num_layers; ++i) {
    auto& l = w.layers[i];
    const std::string p = fmt::format("{}layers.{}.", root, i);
    fn(p + "input_layernorm.weight", std::vector<int64_t>{h}, l.input_norm);
    if (c.kind(i) == LayerKind::kDeltaNet) {
      auto& n = l.delta_net;
      const int64_t conv = d.conv_dim();
      const int64_t vd = d.v_dim();
      const int64_t vh = d.v_heads;
      fn(p + "linear_attn.in_proj_qkv.weight", std::vector<int64_t>{conv, h}, n.in_proj_qkv);
      fn(p + "linear_attn.in_proj_z.weight", std::vector<int64_t>{vd, h}, n.in_proj_z);
      fn(p + "linear_attn.in_proj_b.weight", std::vector<int64_t>{vh, h}, n.in_proj_b);
      fn(p + "linear_attn.in_proj_a.weight", std::vector<int64_t>{vh, h}, n.in_proj_a);
      fn(p + "linear_attn.conv1d.weight", std::vector<int64_t>{conv, 1, d.conv_kernel}, n.conv);
      fn(p + "linear_attn.dt_bias", std::vector<int64_t>{vh}, n.dt_bias);
      fn(p + "linear_attn.A_log", std::vector<int64_t>{vh}, n.a_log);
      fn(p + "linear_attn.norm.weight", std::vector<int64_t>{d.v_head_dim}, n.norm);
      fn(p + "linear_attn.out_proj.weight", std::vector<int64_t>{h, vd}, n.out_proj);
    } else {
      const int64_t q_rows = c.attention_gate ? 2 * q : q;
      fn(p + "self_attn.q_proj.weight", std::vector<int64_t>{q_rows, h}, l.q_proj);
      fn(p + "self_attn.k_proj.weight", std::vector<int64_t>{kv, h}, l.k_proj);
      fn(p + "self_attn.v_proj.weight", std::vector<int64_t>{kv, h}, l.v_proj);
      fn(p + "self_attn.o_proj.weight", std::vector<int64_t>{h, q}, l.o_proj);
      if (c.qkv_bias) {
        fn(p + "self_attn.q_proj.bias", std::vector<int64_t>{q}, l.q_bias);
        fn(p + "self_attn.k_proj.bias", std::vector<int64_t>{kv}, l.k_bias);
        fn(p + "self_attn.v_proj.bias", std::vector<int64_t>{kv}, l.v_bias);
      }
      if (c.qk_norm) {
        fn(p + "self_attn.q_norm.weight", std::vector<int64_t>{c.head_dim}, l.q_norm);
        fn(p + "self_attn.k_norm.weight", std::vector<int64_t>{c.head_dim}, l.k_norm);
      }
    }
    fn(p + "post_attention_layernorm.weight", std::vector<int64_t>{h}, l.post_attention_norm);
    if (c.mlp_kind(i) == MlpKind::kDense) {
      fn(p + "mlp.gate_proj.weight", std::vector<int64_t>{inter, h}, l.gate_proj);
      fn(p + "mlp.up_proj.weight", std::vector<int64_t>{inter, h}, l.up_proj);
      fn(p + "mlp.down_proj.weight", std::vector<int64_t>{h, inter}, l.down_proj);
      continue;
    }
    // Names as save_pretrained writes them (and the published checkpoints hold them): one
    // set of projections per expert, not transformers' in-memory fused 3D tensors.
    const auto swiglu = [&](const std::string& at, int64_t width, auto& mlp) {
      fn(at + "gate_proj.weight", std::vector<int64_t>{width, h}, mlp.gate_proj);
      fn(at + "up_proj.weight", std::vector<int64_t>{width, h}, mlp.up_proj);
      fn(at + "down_proj.weight", std::vector<int64_t>{h, width}, mlp.down_proj);
    };
    auto& moe = l.moe;
    const MoeShape& m = c.moe;
    fn(p + "mlp.gate.weight", std::vector<int64_t>{m.num_experts, h}, moe.router);
    for (uint32_t e = 0; e < m.num_experts; ++e)
      swiglu(fmt::format("{}mlp.experts.{}.", p, e), m.expert_intermediate, moe.experts[e]);
    if (m.shared_intermediate) {
      swiglu(p + "mlp.shared_expert.", m.shared_intermediate, moe.shared);
      fn(p + "mlp.shared_expert_gate.weight", std::vector<int64_t>{1, h}, moe.shared_gate);
    }
  }
  fn(root + "norm.weight", std::vector<int64_t>{h}, w.final_norm);
  if (!c.tie_embeddings)
    fn(std::string("lm_head.weight"), std::vector<int64_t>{c.vocab_size, h}, w.lm_head);
}

size_t element_count(const std::vector<int64_t>& shape) {
  size_t count = 1;
  for (int64_t d : shape) count *= size_t(d);
  return count;
}

}  // namespace

std::vector<WeightTensor> weight_tensors(const ModelConfig& config, ModelWeights& weights) {
  weights = ModelWeights();
  size_layers(config, weights);
  std::vector<WeightTensor> list;
  visit_weights(config, weights,
                [&list](std::string name, std::vector<int64_t> shape, std::vector<float>& data) {
                  data.assign(element_count(shape), 0.0f);
                  list.push_back({std::move(name), std::move(shape), &data});
                });
  return list;
}

bool stored_zero_centred(const ModelConfig& c, const std::string& name) {
  return c.zero_centred_norms && ends_with(name, "norm.weight") &&
         !ends_with(name, "linear_attn.norm.weight");
}

std::string check_weights(const ModelConfig& config, const ModelWeights& weights) {
  if (weights.layers.size() != config.num_layers)
    return fmt::format("the weights hold {} layers, the config {}", weights.layers.size(),
                       config.num_layers);
  for (uint32_t i = 0; i < config.num_layers; ++i) {
    const size_t want = config.mlp_kind(i) == MlpKind::kExperts ? config.moe.num_experts : 0;
    if (weights.layers[i].moe.experts.size() != want)
      return fmt::format("layer {}'s weights hold {} experts, the config {}", i,
                         weights.layers[i].moe.experts.size(), want);
  }
  std::string problem;
  visit_weights(config, weights,
                [&problem](const std::string& name, const std::vector<int64_t>& shape,
                           const std::vector<float>& data) {
                  if (problem.empty() && data.size() != element_count(shape))
                    problem =
                        fmt::format("tensor '{}' holds {} values, its shape {} needs {}", name,
                                    data.size(), shape_string(shape), element_count(shape));
                });
  if (problem.empty() && config.tie_embeddings && !weights.lm_head.empty())
    problem = "the config ties the LM head to the embeddings but a separate lm_head is present";
  return problem;
}

void for_each_weight(const ModelConfig& config, const ModelWeights& weights,
                     const std::function<void(const std::string&, const std::vector<int64_t>&,
                                              const std::vector<float>&)>& fn) {
  HSRING_REQUIRE(check_weights(config, weights).empty());
  visit_weights(config, weights,
                [&fn](const std::string& name, const std::vector<int64_t>& shape,
                      const std::vector<float>& values) { fn(name, shape, values); });
}

std::vector<WeightSpec> weight_specs(const ModelConfig& config) {
  // visit_weights only reads sizes: empty tensors of the right layer count are enough.
  ModelWeights empty;
  size_layers(config, empty);
  std::vector<WeightSpec> list;
  visit_weights(config, empty,
                [&list](std::string name, std::vector<int64_t> shape, const std::vector<float>&) {
                  list.push_back({std::move(name), std::move(shape)});
                });
  return list;
}

float random_uniform(uint64_t key, uint64_t index) {
  // splitmix64 advances its state by the golden-ratio increment before mixing, so the
  // (index + 1)-th output of a stream started at `key` is a pure function of the pair.
  uint64_t state = key + index * 0x9E3779B97F4A7C15ull;
  return signed_unit(splitmix64(state));
}

RandomFill random_fill(const WeightSpec& spec, uint64_t seed) {
  RandomFill fill;
  fill.key = name_key(seed, spec.name);
  if (ends_with(spec.name, ".bias")) {
    fill.scale = 0.5f;  // biases: centred, large enough that a forward dropping one is caught
  } else if (spec.shape.size() == 1) {
    // Norm weights near 1, not exactly 1, so a forward that skips one is caught.
    fill.scale = 0.25f;
    fill.offset = 1.0f;
  } else if (ends_with(spec.name, "embed_tokens.weight") || spec.name == "lm_head.weight") {
    fill.scale = 1.7320508f;  // unit variance
  } else {
    // Variance 1 / fan_in; a depthwise convolution's fan-in is its kernel ([C, 1, K]).
    int64_t fan_in = 1;
    for (size_t i = 1; i < spec.shape.size(); ++i) fan_in *= spec.shape[i];
    fill.scale = std::sqrt(3.0f / float(fan_in));
  }
  return fill;
}

ModelWeights random_weights(const ModelConfig& config, uint64_t seed) {
  ModelWeights w;
  for (const WeightTensor& t : weight_tensors(config, w)) {
    const RandomFill fill = random_fill({t.name, t.shape}, seed);
    std::vector<float>& data = *t.data;
    for (size_t i = 0; i < data.size(); ++i)
      data[i] = fill.offset + fill.scale * random_uniform(fill.key, i);
  }
  return w;
}

}  // namespace hsring
