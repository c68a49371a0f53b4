// The target's weights in fp32, laid out as Hugging Face stores them (Linear weights are
// [out, in], row-major), and the table that names each tensor the way HF checkpoints do.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace hsring {

// A Qwen3.5 DeltaNet layer's token mixer (linear_attn.*); C = conv_dim, V = v_dim.
struct DeltaNetWeights {
  std::vector<float> in_proj_qkv;  // [C, H]: q | k | v channels
  std::vector<float> in_proj_z;    // [V, H]: the output norm's gate
  std::vector<float> in_proj_b;    // [v_heads, H]: beta = sigmoid(x b^T)
  std::vector<float> in_proj_a;    // [v_heads, H]: decay input
  std::vector<float> conv;         // [C, 1, kernel] depthwise causal convolution
  std::vector<float> dt_bias;      // [v_heads]
  std::vector<float> a_log;        // [v_heads]: decay g = -exp(a_log) softplus(a + dt_bias)
  std::vector<float> norm;         // [v_head_dim] gated RMSNorm weight (not zero-centred)
  std::vector<float> out_proj;     // [H, V]
};

// One SwiGLU MLP of a mixture: an expert (mlp.experts.E.*) or the shared expert
// (mlp.shared_expert.*); I = its intermediate size.
struct SwigluWeights {
  std::vector<float> gate_proj;  // [I, H]
  std::vector<float> up_proj;    // [I, H]
  std::vector<float> down_proj;  // [H, I]
};

// A mixture-of-experts MLP (mlp.*): the router, the experts and Qwen3.5's shared expert.
struct MoeWeights {
  std::vector<float> router;           // [num_experts, H]: mlp.gate.weight
  std::vector<SwigluWeights> experts;  // [num_experts]
  SwigluWeights shared;                // shared_intermediate > 0 only
  std::vector<float> shared_gate;      // [1, H]: mlp.shared_expert_gate.weight
};

// One decoder layer. Norm vectors hold the multiplier the forward applies: Qwen3.5's
// zero-centred checkpoint values (w, applied as 1 + w) are stored here as 1 + w.
struct LayerWeights {
  std::vector<float> input_norm;           // [H]  input_layernorm
  std::vector<float> q_proj;               // [heads * head_dim (x 2 with an output gate), H]
  std::vector<float> k_proj;               // [kv_heads * head_dim, H]
  std::vector<float> v_proj;               // [kv_heads * head_dim, H]
  std::vector<float> o_proj;               // [H, heads * head_dim]
  std::vector<float> q_bias;               // [heads * head_dim], Qwen2 (qkv_bias) only
  std::vector<float> k_bias;               // [kv_heads * head_dim], Qwen2 only
  std::vector<float> v_bias;               // [kv_heads * head_dim], Qwen2 only
  std::vector<float> q_norm;               // [head_dim], QK-norm models only
  std::vector<float> k_norm;               // [head_dim], QK-norm models only
  std::vector<float> post_attention_norm;  // [H]
  std::vector<float> gate_proj;            // [I, H], dense MLPs only
  std::vector<float> up_proj;              // [I, H], dense MLPs only
  std::vector<float> down_proj;            // [H, I], dense MLPs only
  DeltaNetWeights delta_net;               // DeltaNet layers only (no self_attn tensors then)
  MoeWeights moe;                          // mixture-of-experts MLPs only (no mlp.*_proj then)
};

struct ModelWeights {
  std::vector<float> embed_tokens;  // [V, H]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [H]
  std::vector<float> lm_head;     // [V, H]; empty when the config ties it to embed_tokens

  const std::vector<float>& lm_head_or_embeddings() const {
    return lm_head.empty() ? embed_tokens : lm_head;
  }
};

// One tensor the model needs: its HF name, its shape and where it goes.
struct WeightTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float>* data;
};

// Every tensor `config` needs, in checkpoint order, with `weights` sized to hold them (the
// vectors are resized, zero-filled). A tied LM head is not listed: it is embed_tokens.
std::vector<WeightTensor> weight_tensors(const ModelConfig& config, ModelWeights& weights);

// Calls fn(name, shape, values) for every tensor of `weights`, in checkpoint order (for
// writers and diagnostics). REQUIRES: check_weights(config, weights).empty().
void for_each_weight(
    const ModelConfig& config, const ModelWeights& weights,
    const std::function<void(const std::string& name, const std::vector<int64_t>& shape,
                             const std::vector<float>& values)>& fn);

// Whether the checkpoint stores tensor `name` as (multiplier - 1): Qwen3.5's RMSNorm weights
// except the DeltaNet output norm. The loader adds 1 (ModelWeights holds multipliers).
bool stored_zero_centred(const ModelConfig& config, const std::string& name);

// "" when every tensor of `weights` has the size `config` implies, else the first mismatch.
std::string check_weights(const ModelConfig& config, const ModelWeights& weights);

// A tensor's HF name and shape without its values: what weight_tensors lists, for code that
// places the tensors elsewhere (the GPU model) without a host copy of them.
struct WeightSpec {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<WeightSpec> weight_specs(const ModelConfig& config);

// Deterministic random weights for a preset or any valid config: each tensor's values are a
// pure function of (seed, tensor name), so the same seed always gives the same model.
// Linear weights are uniform with variance 1/fan_in, norms near 1, biases uniform in
// [-0.5, 0.5), embeddings near unit variance: activations keep a sane scale through many
// layers.
ModelWeights random_weights(const ModelConfig& config, uint64_t seed);

// How random_weights draws one tensor, counter-based so a GPU can draw the same values in
// parallel: value i is offset + scale * u_i (fp32 multiply, then fp32 add), where u_i is
// the top 24 bits of splitmix64's output for the state key + (i + 1) * 0x9E3779B97F4A7C15,
// mapped to [-1, 1) (exact in fp32): random_uniform(key, i).
struct RandomFill {
  uint64_t key = 0;
  float scale = 0;
  float offset = 0;
};
RandomFill random_fill(const WeightSpec& spec, uint64_t seed);
float random_uniform(uint64_t key, uint64_t index);

}  // namespace hsring
