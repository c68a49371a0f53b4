// The shape of a Llama / Qwen2 / Qwen3 / Qwen3.5-family decoder-only target (dense or
// mixture-of-experts): named presets, parsing of a Hugging Face config.json, and the rule
// that picks which layers' outputs are captured.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "model/delta_net_shape.h"
#include "model/rope.h"

namespace hsring {

// What a decoder layer mixes tokens with: softmax attention or Qwen3.5's Gated DeltaNet.
enum class LayerKind : uint8_t { kAttention, kDeltaNet };

// What a decoder layer's MLP is: one SwiGLU MLP, or a mixture of SwiGLU experts.
enum class MlpKind : uint8_t { kDense, kExperts };

// The mixture-of-experts MLPs of Qwen3-MoE and Qwen3.5-MoE: a router picks
// experts_per_token of num_experts experts per token (model/moe_router.h), and Qwen3.5 adds
// a shared expert scaled by a sigmoid gate.
struct MoeShape {
  uint32_t num_experts = 0;          // num_experts
  uint32_t experts_per_token = 0;    // num_experts_per_tok (top-k)
  uint32_t expert_intermediate = 0;  // moe_intermediate_size
  uint32_t shared_intermediate = 0;  // shared_expert_intermediate_size; 0: no shared expert
  bool normalise_top_k = false;      // norm_topk_prob: the top-k weights renormalised to sum 1
};

struct ModelConfig {
  std::string name;  // preset name or the config.json it came from
  // "llama", "qwen2", "qwen3", "qwen3_moe", "qwen3_5" or "qwen3_5_moe"; any other for an
  // outline (model_outline_of).
  std::string model_type = "qwen3";
  uint32_t hidden_size = 0;
  uint32_t intermediate_size = 0;  // of the dense MLPs; 0 when every MLP is a mixture
  uint32_t num_layers = 0;
  uint32_t num_heads = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;  // need not equal hidden_size / num_heads (Qwen3-32B: 64 x 128 vs 5120)
  uint32_t vocab_size = 0;
  double rope_theta = 10000.0;
  RopeScaling rope;  // plain RoPE unless the config scales it (Llama 3.1: llama3)
  double rms_norm_eps = 1e-6;
  bool qk_norm = false;         // Qwen3: RMSNorm over each head of q and k before RoPE
  bool qkv_bias = false;        // Qwen2: q_proj, k_proj and v_proj carry biases
  bool tie_embeddings = false;  // the LM head reuses model.embed_tokens.weight

  // Qwen3.5 (hybrid): the kind of each layer (empty: every layer attention), the DeltaNet
  // shape, RoPE on the first rotary_dim dims of a head only (0: all of them), a sigmoid
  // output gate per attention head (q_proj emits [q | gate] per head), RMSNorm weights
  // stored in the checkpoint as (multiplier - 1), and where the text model's tensors live
  // ("model.language_model." in the multimodal wrapper).
  std::vector<LayerKind> layer_kinds;
  DeltaNetShape delta_net;
  uint32_t rotary_dim = 0;
  bool attention_gate = false;
  bool zero_centred_norms = false;
  std::string weight_prefix = "model.";

  // Mixture of experts: the kind of each layer's MLP (empty: every MLP dense) and the
  // experts' shape.
  std::vector<MlpKind> mlp_kinds;
  MoeShape moe;

  // Why hsring's own forwards cannot run this model, "" when they can: an outline of an
  // architecture they do not build, read for drafters whose targets are user commands.
  std::string no_native_forward;

  uint32_t q_dim() const { return num_heads * head_dim; }
  uint32_t kv_dim() const { return num_kv_heads * head_dim; }
  uint32_t rope_dim() const { return rotary_dim ? rotary_dim : head_dim; }
  LayerKind kind(uint32_t layer) const {
    return layer < layer_kinds.size() ? layer_kinds[layer] : LayerKind::kAttention;
  }
  MlpKind mlp_kind(uint32_t layer) const {
    return layer < mlp_kinds.size() ? mlp_kinds[layer] : MlpKind::kDense;
  }
  bool hybrid() const;       // some layer is a DeltaNet layer
  bool has_experts() const;  // some layer's MLP is a mixture of experts
};

// The most decoder layers a model may have: what validate_config accepts, and so the bound
// on any layer count or layer list read from a file.
inline constexpr uint32_t kMaxModelLayers = 1024;

// "" when the config is usable, else what is wrong with it.
std::string validate_config(const ModelConfig& config);

// Why the CUDA forward cannot run `config` though the CPU forward can, "" when it can: a
// mixture of experts whose hidden or expert width is not a multiple of 8. (A mixture must
// also fit one GPU: there is no expert parallelism across GPUs, which the weights'
// out-of-memory error says.)
std::string cuda_forward_refusal(const ModelConfig& config);

// Presets (docs/target-model.md): "tiny", "qwen3-8b", "qwen3.6-27b" (the Qwen3.5 / 3.6 hybrid
// shape), "qwen3-dense-27b" (a dense stand-in of that size), "qwen3-30b-a3b" and
// "qwen3.6-35b-a3b" (the mixture-of-experts shapes). Throws Error(kModelBadConfig) listing the
// known names.
ModelConfig named_model_config(std::string_view name);
std::vector<std::string> named_model_configs();

// Reads the subset of a Hugging Face config.json that the forward needs and refuses what it
// cannot honour (other RoPE types, o/MLP biases, sliding windows, other activations or model
// types). Reads the fields of transformers 4 (rope_theta, rope_scaling, torch_dtype) and 5
// (rope_parameters, dtype) alike.
// Throws Error(kModel) or Error(kModelBadConfig) naming `source` and the field.
ModelConfig parse_hf_config(std::string_view json_text, const std::string& source);
// Same, from a file. Throws Error(kModel) when it cannot be read.
ModelConfig load_hf_config(const std::filesystem::path& config_json);

// What a drafter needs of any decoder-only model, whatever its architecture: hidden size,
// vocabulary, layer count, attention heads and head size, MLP width, RoPE base, RMS eps,
// whether the head is tied, where its tensors live (the text model of a multimodal
// wrapper: `text_config`, tensors under "model.language_model."). Layer kinds and experts
// are not read. `why_not_native` becomes no_native_forward. Throws Error(kModel) or
// Error(kModelBadConfig) naming the field a drafter cannot do without.
ModelConfig parse_hf_outline(std::string_view json_text, const std::string& source,
                             const std::string& why_not_native);

// Which decoder layers' outputs feed the drafter: the DFlash rule, k ids spread evenly over
// [1, num_layers - 3] (36 layers, k 5: 1 9 17 25 33). When that range holds fewer than k
// layers (tiny models) the ids spread over [0, num_layers - 2] instead, and over every
// layer only when k is the layer count; k == 1 takes the middle layer, never the last. The
// last layer is avoided because HF's hidden_states[num_layers] is it after the final norm
// (a capture is before it): a drafter trained on it would not match what engines feed it.
// Throws Error(kModelBadConfig) when k is 0 or exceeds num_layers.
std::vector<int32_t> default_capture_layers(uint32_t num_layers, uint32_t k);

// The layers a run captures by default for `config`: default_capture_layers for dense
// models. For a hybrid (Qwen3.5) model, full-attention layers only, as the published DFlash
// drafters do: SpecForge's Qwen3.5-27B DFlash config (configs/qwen3.5-27b-dflash.json)
// reads layers 3, 15, 31, 47, 59 of the 64-layer shape, which k == 5 returns there; other
// shapes and counts spread k ids evenly over the full-attention layers below the last
// (rounded half to even), or fall back to default_capture_layers when there are fewer.
std::vector<int32_t> capture_layers_for(const ModelConfig& config, uint32_t k);

// The MLP width a drafter borrows from its target: the target's dense MLP width, or, when
// it has none (every MLP a mixture, or an outline without intermediate_size), three times
// its hidden size (the dense width of Qwen3-30B-A3B: 6144 at 2048).
uint32_t drafter_mlp_width(const ModelConfig& target);

// Weights the config implies (the LM head counted once when tied).
uint64_t parameter_count(const ModelConfig& config);

}  // namespace hsring
