#include "model/model_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"

namespace hsring {

namespace {

ModelConfig tiny_config() {
  // Byte-level vocabulary and a few layers: a forward over a 512-token slot takes about
  // 0.14 s on one core. QK-norm and tied embeddings exercise both optional paths.
  ModelConfig c;
  c.name = "tiny";
  c.model_type = "qwen3";
  c.hidden_size = 128;
  c.intermediate_size = 384;
  c.num_layers = 6;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.vocab_size = 256;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6;
  c.qk_norm = true;
  c.tie_embeddings = true;
  return c;
}

ModelConfig qwen3_8b_config() {
  // Qwen/Qwen3-8B's published config.json.
  ModelConfig c;
  c.name = "qwen3-8b";
  c.model_type = "qwen3";
  c.hidden_size = 4096;
  c.intermediate_size = 12288;
  c.num_layers = 36;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.vocab_size = 151936;
  c.rope_theta = 1000000.0;
  c.rms_norm_eps = 1e-6;
  c.qk_norm = true;
  c.tie_embeddings = false;
  return c;
}

ModelConfig dense_27b_config() {
  // A dense, full-attention stand-in of the 27B class: Qwen3-32B's attention (64 x 128,
  // 8 KV heads) with a narrower MLP, about 24.7e9 parameters; what the CUDA forward runs
  // at that size until it has a DeltaNet kernel.
  ModelConfig c;
  c.name = "qwen3-dense-27b";
  c.model_type = "qwen3";
  c.hidden_size = 5120;
  c.intermediate_size = 17408;
  c.num_layers = 64;
  c.num_heads = 64;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.vocab_size = 151936;
  c.rope_theta = 1000000.0;
  c.rms_norm_eps = 1e-6;
  c.qk_norm = true;
  c.tie_embeddings = false;
  return c;
}

ModelConfig qwen36_27b_config() {
  // Qwen/Qwen3.6-27B's text model (Qwen3.5-27B has the same shape): 16 groups of three
  // Gated DeltaNet layers and one gated full-attention layer; attention 24 / 4 heads of 256
  // with RoPE on 64 dims; DeltaNet 16 q/k heads and 48 v heads of 128, kernel 4.
  ModelConfig c;
  c.name = "qwen3.6-27b";
  c.model_type = "qwen3_5";
  c.hidden_size = 5120;
  c.intermediate_size = 17408;
  c.num_layers = 64;
  c.num_heads = 24;
  c.num_kv_heads = 4;
  c.head_dim = 256;
  c.vocab_size = 248320;
  c.rope_theta = 10000000.0;
  c.rms_norm_eps = 1e-6;
  c.qk_norm = true;
  c.tie_embeddings = false;
  for (uint32_t i = 0; i < c.num_layers; ++i)
    c.layer_kinds.push_back((i + 1) % 4 ? LayerKind::kDeltaNet : LayerKind::kAttention);
  c.delta_net = {16, 48, 128, 128, 4};
  c.rotary_dim = 64;
  c.attention_gate = true;
  c.zero_centred_norms = true;
  c.weight_prefix = "model.language_model.";
  return c;
}

ModelConfig qwen3_30b_a3b_config() {
  // Qwen/Qwen3-30B-A3B's published config.json: 48 layers, every MLP a mixture of 128
  // experts of 768, 8 per token, renormalised.
  ModelConfig c = qwen3_8b_config();
  c.name = "qwen3-30b-a3b";
  c.model_type = "qwen3_moe";
  c.hidden_size = 2048;
  c.intermediate_size = 6144;  // of dense layers; it has none (mlp_only_layers is empty)
  c.num_layers = 48;
  c.num_heads = 32;
  c.num_kv_heads = 4;
  c.mlp_kinds.assign(c.num_layers, MlpKind::kExperts);
  c.moe = {128, 8, 768, 0, true};
  return c;
}

ModelConfig qwen36_35b_a3b_config() {
  // Qwen/Qwen3.6-35B-A3B's text model (Qwen3.5-35B-A3B has the same shape): 10 groups of
  // three DeltaNet layers and one gated attention layer, attention 16 / 2 heads of 256,
  // DeltaNet 16 q/k and 32 v heads of 128; every MLP 256 experts of 512, 8 per token, and a
  // shared expert of 512.
  ModelConfig c = qwen36_27b_config();
  c.name = "qwen3.6-35b-a3b";
  c.model_type = "qwen3_5_moe";
  c.hidden_size = 2048;
  c.intermediate_size = 0;
  c.num_layers = 40;
  c.num_heads = 16;
  c.num_kv_heads = 2;
  c.layer_kinds.resize(c.num_layers);
  c.delta_net = {16, 32, 128, 128, 4};
  c.mlp_kinds.assign(c.num_layers, MlpKind::kExperts);
  c.moe = {256, 8, 512, 512, true};
  return c;
}

}  // namespace

std::string validate_config(const ModelConfig& c) {
  const auto in_range = [](uint32_t v, uint32_t hi) { return v >= 1 && v <= hi; };
  const bool outline = !c.no_native_forward.empty();
  if (!in_range(c.hidden_size, 65536)) return "hidden size must be in [1, 65536]";
  // Only dense MLPs need a width; an outline's is optional (a drafter picks one).
  const bool dense_mlp = c.mlp_kinds.empty() || std::find(c.mlp_kinds.begin(), c.mlp_kinds.end(),
                                                          MlpKind::kDense) != c.mlp_kinds.end();
  if ((dense_mlp && !outline) || c.intermediate_size != 0)
    if (!in_range(c.intermediate_size, 1u << 20)) return "intermediate size must be in [1, 2^20]";
  if (!in_range(c.num_layers, kMaxModelLayers))
    return fmt::format("layer count must be in [1, {}]", kMaxModelLayers);
  if (!in_range(c.num_heads, 1024)) return "attention head count must be in [1, 1024]";
  if (!in_range(c.num_kv_heads, c.num_heads))
    return fmt::format("KV head count must be in [1, num_heads = {}]", c.num_heads);
  if (c.num_heads % c.num_kv_heads != 0)
    return fmt::format("attention heads ({}) must be a multiple of KV heads ({})", c.num_heads,
                       c.num_kv_heads);
  if (!in_range(c.head_dim, 1024) || c.head_dim % 2 != 0)
    return "head dim must be even and in [2, 1024] (RoPE rotates pairs)";
  if (!in_range(c.vocab_size, uint32_t(std::numeric_limits<int32_t>::max())))
    return "vocab size must be in [1, 2^31 - 1] (token ids are int32)";
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta)) return "rope theta must be positive";
  if (!(c.rms_norm_eps > 0) || !std::isfinite(c.rms_norm_eps))
    return "RMS norm eps must be positive";
  if (!outline && c.model_type != "llama" && c.model_type != "qwen2" && c.model_type != "qwen3" &&
      c.model_type != "qwen3_moe" && c.model_type != "qwen3_5" && c.model_type != "qwen3_5_moe")
    return "model type '" + c.model_type +
           "' is not supported (llama, qwen2, qwen3, qwen3_moe, qwen3_5, qwen3_5_moe)";
  if (!c.mlp_kinds.empty() && c.mlp_kinds.size() != c.num_layers)
    return fmt::format("MLP kinds list {} layers, not {}", c.mlp_kinds.size(), c.num_layers);
  if (c.has_experts()) {
    const MoeShape& m = c.moe;
    if (!in_range(m.num_experts, 4096)) return "expert count must be in [1, 4096]";
    if (!in_range(m.experts_per_token, m.num_experts))
      return fmt::format("experts per token must be in [1, num_experts = {}]", m.num_experts);
    if (!in_range(m.expert_intermediate, 1u << 20))
      return "expert intermediate size must be in [1, 2^20]";
    if (m.shared_intermediate > (1u << 20))
      return "shared expert intermediate size must be at most 2^20";
  }
  if (!c.layer_kinds.empty() && c.layer_kinds.size() != c.num_layers)
    return fmt::format("layer kinds list {} layers, not {}", c.layer_kinds.size(), c.num_layers);
  if (c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim)
    return fmt::format("rotary dim {} must be even and at most the head dim", c.rotary_dim);
  if (c.hybrid()) {
    const DeltaNetShape& d = c.delta_net;
    if (!in_range(d.qk_heads, 1024) || !in_range(d.v_heads, 1024) ||
        !in_range(d.qk_head_dim, 1024) || !in_range(d.v_head_dim, 1024))
      return "DeltaNet head counts and sizes must be in [1, 1024]";
    if (d.v_heads % d.qk_heads != 0)
      return fmt::format("DeltaNet value heads ({}) must be a multiple of its key heads ({})",
                         d.v_heads, d.qk_heads);
    if (!in_range(d.conv_kernel, 64)) return "DeltaNet convolution kernel must be in [1, 64]";
  }
  if (std::string why = validate_rope(c.rope); !why.empty()) return why;
  if (c.rope.type == RopeType::kDynamic && c.rope_dim() < 4)
    return "dynamic RoPE needs a rotary dim of at least 4";
  return "";
}

std::string cuda_forward_refusal(const ModelConfig& c) {
  // The grouped GEMM copies 16-byte pieces of rows (model/cuda_moe.h). Every released
  // mixture qualifies; what else is missing (expert parallelism across GPUs) shows when a
  // model does not fit one GPU, in the weights' out-of-memory message.
  if (!c.has_experts() || (c.hidden_size % 8 == 0 && c.moe.expert_intermediate % 8 == 0)) return "";
  return fmt::format(
      "model '{}' ({}): the CUDA mixture-of-experts MLP needs a hidden size and an expert "
      "intermediate size that are multiples of 8, not {} and {}; run the targets on the CPU or "
      "through --target-cmd",
      c.name, c.model_type, c.hidden_size, c.moe.expert_intermediate);
}

std::vector<std::string> named_model_configs() {
  return {"tiny", "qwen3-8b", "qwen3.6-27b", "qwen3-dense-27b", "qwen3-30b-a3b", "qwen3.6-35b-a3b"};
}

ModelConfig named_model_config(std::string_view name) {
  if (name == "tiny") return tiny_config();
  if (name == "qwen3-8b") return qwen3_8b_config();
  if (name == "qwen3.6-27b") return qwen36_27b_config();
  if (name == "qwen3-dense-27b") return dense_27b_config();
  if (name == "qwen3-30b-a3b") return qwen3_30b_a3b_config();
  if (name == "qwen3.6-35b-a3b") return qwen36_35b_a3b_config();
  std::string known;
  for (const std::string& n : named_model_configs()) known += (known.empty() ? "" : ", ") + n;
  throw Error(Errc::kModelBadConfig,
              "unknown model shape '" + std::string(name) + "' (known: " + known + ")");
}

std::vector<int32_t> default_capture_layers(uint32_t num_layers, uint32_t k) {
  if (k == 0 || k > num_layers)
    throw Error(
        Errc::kModelBadConfig,
        fmt::format("cannot capture {} distinct layers of a {}-layer model", k, num_layers));
  // Never the last layer unless every layer is asked for: HF's hidden_states[L] is that
  // layer after the final norm, while a capture is before it, so a drafter trained on our
  // last layer would be fed another tensor by the engines that serve it.
  const int64_t below_last = num_layers > 1 ? int64_t(num_layers) - 2 : 0;
  if (k == 1) return {int32_t(std::min<int64_t>(num_layers / 2, below_last))};
  int64_t first = 1;
  int64_t last = int64_t(num_layers) - 3;
  if (last - first + 1 < int64_t(k)) {
    first = 0;
    last = int64_t(k) < int64_t(num_layers) ? below_last : int64_t(num_layers) - 1;
  }
  const int64_t span = last - first;
  const int64_t steps = k - 1;
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < int64_t(k); ++i) {
    // first + i * span / steps, rounded half to even (as Python's round() does).
    int64_t q = i * span / steps;
    const int64_t twice_rem = 2 * (i * span % steps);
    if (twice_rem > steps || (twice_rem == steps && ((first + q) & 1))) ++q;
    ids.push_back(int32_t(first + q));
  }
  return ids;
}

std::vector<int32_t> capture_layers_for(const ModelConfig& c, uint32_t k) {
  if (!c.hybrid()) return default_capture_layers(c.num_layers, k);
  std::vector<int32_t> attention;
  for (uint32_t i = 0; i + 1 < c.num_layers; ++i)
    if (c.kind(i) == LayerKind::kAttention) attention.push_back(int32_t(i));
  if (k == 0 || k > attention.size()) return default_capture_layers(c.num_layers, k);
  // The published choice for the Qwen3.5 / 3.6 27B shape (16 groups of 3 + 1).
  if (k == 5 && c.num_layers == 64 && attention.size() == 15 && attention.front() == 3 &&
      attention.back() == 59)
    return {3, 15, 31, 47, 59};
  if (k == 1) return {attention[attention.size() / 2]};
  std::vector<int32_t> ids;
  const int64_t span = int64_t(attention.size()) - 1;
  const int64_t steps = k - 1;
  for (int64_t i = 0; i < int64_t(k); ++i) {
    int64_t q = i * span / steps;
    const int64_t twice_rem = 2 * (i * span % steps);
    if (twice_rem > steps || (twice_rem == steps && (q & 1))) ++q;
    ids.push_back(attention[size_t(q)]);
  }
  return ids;
}

bool ModelConfig::has_experts() const {
  return std::find(mlp_kinds.begin(), mlp_kinds.end(), MlpKind::kExperts) != mlp_kinds.end();
}

bool ModelConfig::hybrid() const {
  return std::find(layer_kinds.begin(), layer_kinds.end(), LayerKind::kDeltaNet) !=
         layer_kinds.end();
}

uint32_t drafter_mlp_width(const ModelConfig& target) {
  return target.intermediate_size ? target.intermediate_size : 3 * target.hidden_size;
}

uint64_t parameter_count(const ModelConfig& c) {
  const uint64_t h = c.hidden_size;
  const uint64_t q_rows = uint64_t(c.q_dim()) * (c.attention_gate ? 2 : 1);
  const uint64_t attention = h * q_rows + h * c.q_dim() + h * c.kv_dim() * 2 +
                             (c.qkv_bias ? c.q_dim() + 2 * c.kv_dim() : 0) +
                             (c.qk_norm ? 2 * c.head_dim : 0);
  const DeltaNetShape& d = c.delta_net;
  const uint64_t delta = h * d.conv_dim() + h * d.v_dim() + 2 * h * d.v_heads +
                         uint64_t(d.conv_dim()) * d.conv_kernel + 2 * d.v_heads + d.v_head_dim +
                         h * d.v_dim();
  const MoeShape& m = c.moe;
  const uint64_t experts = uint64_t(m.num_experts) * (3 * h * m.expert_intermediate + h) +
                           (m.shared_intermediate ? 3 * h * m.shared_intermediate + h : 0);
  uint64_t total = 0;
  for (uint32_t i = 0; i < c.num_layers; ++i)
    total += 2 * h + (c.kind(i) == LayerKind::kDeltaNet ? delta : attention) +
             (c.mlp_kind(i) == MlpKind::kExperts ? experts : 3 * h * c.intermediate_size);
  const uint64_t embed = uint64_t(c.vocab_size) * h;
  return total + embed * (c.tie_embeddings ? 1 : 2) + h;
}

}  // namespace hsring
