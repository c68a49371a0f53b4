// parse_hf_config: the fields of a Hugging Face config.json the forward needs, with
// transformers' defaults, and the refusal of what it cannot honour, naming the field;
// parse_hf_outline: the few a drafter needs, from any architecture's config.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include "common/error.h"

#include "model/json.h"
#include "model/model_config.h"
#include "model/model_text_file.h"

namespace hsring {

namespace {

// Field readers: each names the source and the key in its error.
class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& root, const std::string& source)
      : root_(root), source_(source) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(Errc::kModelBadConfig, source_ + ": " + what);
  }

  // Absent and null read the same: HF writes `"head_dim": null` for "derive it".
  const nlohmann::json* get(std::string_view key) const {
    const nlohmann::json* v = json_member(root_, key);
    return v && !v->is_null() ? v : nullptr;
  }

  uint32_t positive_int(std::string_view key, const uint32_t* fallback = nullptr) const {
    const nlohmann::json* v = get(key);
    if (!v) {
      if (fallback) return *fallback;
      fail("required field '" + std::string(key) + "' is missing");
    }
    if (!v->is_number() || !json_int(*v) || *json_int(*v) < 1 ||
        *json_int(*v) > std::numeric_limits<int32_t>::max())
      fail("'" + std::string(key) + "' must be a positive integer, got " + describe_json(*v));
    return uint32_t(*json_int(*v));
  }

  double positive_number(const nlohmann::json* v, std::string_view key, double fallback) const {
    if (!v) return fallback;
    if (!v->is_number() || !(v->get<double>() > 0))
      fail("'" + std::string(key) + "' must be a positive number, got " + describe_json(*v));
    return v->get<double>();
  }

  double positive_number(std::string_view key, double fallback) const {
    return positive_number(get(key), key, fallback);
  }

  bool boolean(std::string_view key, bool fallback) const {
    const nlohmann::json* v = get(key);
    if (!v) return fallback;
    if (!v->is_boolean())
      fail("'" + std::string(key) + "' must be true or false, got " + describe_json(*v));
    return v->get<bool>();
  }

  std::string string(std::string_view key) const {
    const nlohmann::json* v = get(key);
    if (!v) fail("required field '" + std::string(key) + "' is missing");
    if (!v->is_string())
      fail("'" + std::string(key) + "' must be a string, got " + describe_json(*v));
    return v->get_ref<const std::string&>();
  }

  void require_false(std::string_view key, const std::string& why) const {
    if (boolean(key, false)) fail("'" + std::string(key) + "' is true: " + why);
  }

 private:
  const nlohmann::json& root_;
  const std::string& source_;
};

// Keys of a RoPE object that transformers defines; any other key could change the rule in a
// way this reader does not know, so it is refused rather than ignored.
constexpr std::string_view kRopeKeys[] = {"rope_type",
                                          "type",
                                          "rope_theta",
                                          "factor",
                                          "low_freq_factor",
                                          "high_freq_factor",
                                          "original_max_position_embeddings",
                                          "beta_fast",
                                          "beta_slow",
                                          "attention_factor",
                                          "mscale",
                                          "mscale_all_dim",
                                          "truncate",
                                          "partial_rotary_factor"};

// A number member of a RoPE object (null reads as absent): `fallback` when absent, or a
// failure naming `field.key` when there is none.
double rope_number(const ConfigReader& r, const nlohmann::json& rope, const std::string& field,
                   std::string_view key, std::optional<double> fallback = std::nullopt) {
  const nlohmann::json* v = json_member(rope, key);
  const std::string name = "'" + field + "." + std::string(key) + "'";
  if (!v || v->is_null()) {
    if (!fallback) r.fail(name + " is required by this rope_type");
    return *fallback;
  }
  if (!v->is_number() || !std::isfinite(v->get<double>()))
    r.fail(name + " must be a number, got " + describe_json(*v));
  return v->get<double>();
}

// original_max_position_embeddings of llama3 / yarn: the RoPE object's, else the top-level
// one, else max_position_embeddings (how transformers standardises it).
double original_positions(const ConfigReader& r, const nlohmann::json& rope,
                          const std::string& field) {
  const nlohmann::json* own = json_member(rope, "original_max_position_embeddings");
  if (own && !own->is_null())
    return rope_number(r, rope, field, "original_max_position_embeddings");
  if (r.get("original_max_position_embeddings"))
    return r.positive_number("original_max_position_embeddings", 0);
  if (!r.get("max_position_embeddings"))
    r.fail("'" + field +
           ".original_max_position_embeddings' is missing and so is "
           "'max_position_embeddings'");
  return r.positive_number("max_position_embeddings", 0);
}

// The Qwen3.5 hybrid, dense or mixture-of-experts (model_type after "_text" is dropped).
bool is_qwen35(const std::string& model_type) {
  return model_type == "qwen3_5" || model_type == "qwen3_5_moe";
}

// The RoPE rule. transformers 4 writes rope_theta and rope_scaling ({"rope_type" or "type",
// factor, ...}); transformers 5 writes rope_parameters (the same keys and rope_theta). As
// transformers reads them: a non-empty rope_scaling wins over rope_parameters, theta comes
// from the chosen object, else from rope_theta, else 1e4. Types other than default, linear,
// dynamic, yarn and llama3 are refused, naming the type.
void read_rope(const ConfigReader& r, ModelConfig& c) {
  const bool qwen35 = is_qwen35(c.model_type);
  c.rope_theta = r.positive_number("rope_theta", 10000.0);
  const nlohmann::json* rope = nullptr;
  std::string field;
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    const nlohmann::json* v = r.get(key);
    if (!v) continue;
    if (!v->is_object())
      r.fail("'" + std::string(key) + "' must be an object or null, got " + describe_json(*v));
    if (!rope && !v->empty()) {
      rope = v;
      field = key;
    }
  }
  // Partial RoPE: Qwen3.5 rotates the first quarter of each head (its default, as
  // transformers sets it); the rope object's own factor wins over the top-level one.
  double partial = qwen35 ? 0.25 : 1.0;
  if (const nlohmann::json* v = r.get("partial_rotary_factor")) {
    if (!v->is_number() || !(v->get<double>() > 0 && v->get<double>() <= 1))
      r.fail("'partial_rotary_factor' must be a number in (0, 1], got " + describe_json(*v));
    partial = v->get<double>();
  }
  const auto set_rotary = [&](double factor) {
    if (factor == 1.0) {
      c.rotary_dim = 0;
      return;
    }
    if (!qwen35)
      r.fail(
          fmt::format("'partial_rotary_factor' is {:f}: only RoPE over the whole head is "
                      "supported for {}",
                      factor, c.model_type));
    c.rotary_dim = uint32_t(double(c.head_dim) * factor);  // int() in transformers
  };
  set_rotary(partial);
  if (!rope) return;
  for (const auto& [key, value] : rope->items()) {
    if (value.is_object())
      r.fail("'" + field + "." + key + "' is an object: per-layer-type RoPE is not supported");
    // Multimodal RoPE: with text positions its three sections rotate by the same position,
    // which is plain RoPE.
    if (qwen35 && (key == "mrope_section" || key == "mrope_interleaved")) continue;
    if (std::find(std::begin(kRopeKeys), std::end(kRopeKeys), key) == std::end(kRopeKeys))
      r.fail("'" + field + "." + key + "' is not a RoPE parameter hsring knows");
  }
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    const nlohmann::json* v = json_member(*rope, key);
    if (!v || v->is_null()) continue;
    if (!v->is_string())
      r.fail("'" + field + "." + key + "' must be a string, got " + describe_json(*v));
    type = v->get_ref<const std::string&>();
    break;
  }
  c.rope_theta =
      r.positive_number(json_member(*rope, "rope_theta"), field + ".rope_theta", c.rope_theta);
  const double own_partial = rope_number(r, *rope, field, "partial_rotary_factor", partial);
  if (!(own_partial > 0 && own_partial <= 1))
    r.fail("'" + field + ".partial_rotary_factor' must be in (0, 1]");
  set_rotary(own_partial);
  RopeScaling& s = c.rope;
  if (type == "default") {
    s.type = RopeType::kDefault;
  } else if (type == "linear") {
    s.type = RopeType::kLinear;
    s.factor = rope_number(r, *rope, field, "factor");
  } else if (type == "dynamic") {
    s.type = RopeType::kDynamic;
    s.factor = rope_number(r, *rope, field, "factor");
    if (!r.get("max_position_embeddings"))
      r.fail("rope_type \"dynamic\" needs 'max_position_embeddings', which is missing");
    s.max_positions = r.positive_number("max_position_embeddings", 0);
  } else if (type == "llama3") {
    s.type = RopeType::kLlama3;
    s.factor = rope_number(r, *rope, field, "factor");
    s.low_freq_factor = rope_number(r, *rope, field, "low_freq_factor");
    s.high_freq_factor = rope_number(r, *rope, field, "high_freq_factor");
    s.original_max_positions = original_positions(r, *rope, field);
  } else if (type == "yarn") {
    s.type = RopeType::kYarn;
    s.original_max_positions = original_positions(r, *rope, field);
    // No factor: the ratio of the new context to the original one (DeepSeek-V3 style).
    const nlohmann::json* factor = json_member(*rope, "factor");
    if (!factor || factor->is_null()) {
      if (!r.get("max_position_embeddings"))
        r.fail("'" + field + ".factor' is missing and so is 'max_position_embeddings'");
      s.factor = r.positive_number("max_position_embeddings", 0) / s.original_max_positions;
    } else {
      s.factor = rope_number(r, *rope, field, "factor");
    }
    // transformers reads `beta or default`: 0 means the default too.
    s.beta_fast = rope_number(r, *rope, field, "beta_fast", 32.0);
    if (s.beta_fast == 0) s.beta_fast = 32.0;
    s.beta_slow = rope_number(r, *rope, field, "beta_slow", 1.0);
    if (s.beta_slow == 0) s.beta_slow = 1.0;
    if (const nlohmann::json* t = json_member(*rope, "truncate"); t && !t->is_null()) {
      if (!t->is_boolean()) r.fail("'" + field + ".truncate' must be true or false");
      s.truncate = t->get<bool>();
    }
    // cos / sin scale: attention_factor, else mscale's ratio, else 0.1 ln(factor) + 1.
    const auto mscale = [](double scale, double m) {
      return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
    };
    const double m = rope_number(r, *rope, field, "mscale", 0.0);
    const double m_all = rope_number(r, *rope, field, "mscale_all_dim", 0.0);
    if (const nlohmann::json* a = json_member(*rope, "attention_factor"); a && !a->is_null())
      s.attention_factor = rope_number(r, *rope, field, "attention_factor");
    else if (m != 0 && m_all != 0)
      s.attention_factor = mscale(s.factor, m) / mscale(s.factor, m_all);
    else
      s.attention_factor = mscale(s.factor, 1.0);
  } else {
    r.fail("'" + field + ".rope_type' is \"" + type +
           "\": not supported (default, linear, dynamic, yarn, llama3)");
  }
  if (std::string why = validate_rope(s); !why.empty()) r.fail("'" + field + "': " + why);
}

void reject_unsupported(const ConfigReader& r, const std::string& model_type) {
  if (const nlohmann::json* act = r.get("hidden_act");
      act && !(act->is_string() && act->get_ref<const std::string&>() == "silu"))
    r.fail("'hidden_act' is " + describe_json(*act) + ": only \"silu\" (SwiGLU) is supported");
  // Qwen2's q/k/v biases come with its model_type (transformers ignores this flag there);
  // elsewhere the flag biases o_proj too, which the forward does not implement.
  if (model_type != "qwen2")
    r.require_false("attention_bias",
                    "biased q/k/v/o projections are not supported (only "
                    "qwen2's q/k/v biases are)");
  r.require_false("mlp_bias", "biased MLP projections are not supported");
  r.require_false("use_sliding_window", "sliding-window attention is not supported");
  if (is_qwen35(model_type)) return;  // its layer_types are read by read_qwen35
  if (const nlohmann::json* types = r.get("layer_types")) {
    if (!types->is_array()) r.fail("'layer_types' must be an array");
    for (const nlohmann::json& t : *types)
      if (!(t.is_string() && t.get_ref<const std::string&>() == "full_attention"))
        r.fail("'layer_types' holds " + describe_json(t) +
               ": only \"full_attention\" layers are supported");
  }
}

// Qwen3.5's hybrid fields, with transformers' defaults: layer_types (else a full-attention
// layer every full_attention_interval = 4), the DeltaNet shape, the output gate and the
// zero-centred norms that come with the architecture.
void read_qwen35(const ConfigReader& r, ModelConfig& c) {
  c.qk_norm = true;
  c.attention_gate = true;
  c.zero_centred_norms = true;
  if (const nlohmann::json* types = r.get("layer_types")) {
    if (!types->is_array()) r.fail("'layer_types' must be an array");
    for (const nlohmann::json& t : *types) {
      if (t.is_string() && t.get_ref<const std::string&>() == "full_attention")
        c.layer_kinds.push_back(LayerKind::kAttention);
      else if (t.is_string() && t.get_ref<const std::string&>() == "linear_attention")
        c.layer_kinds.push_back(LayerKind::kDeltaNet);
      else
        r.fail("'layer_types' holds " + describe_json(t) +
               ": only \"full_attention\" and \"linear_attention\" layers are supported");
    }
    if (c.layer_kinds.size() != c.num_layers)
      r.fail(fmt::format("'layer_types' lists {} layers, 'num_hidden_layers' is {}",
                         c.layer_kinds.size(), c.num_layers));
  } else {
    const uint32_t four = 4;
    const uint32_t interval = r.positive_int("full_attention_interval", &four);
    for (uint32_t i = 0; i < c.num_layers; ++i)
      c.layer_kinds.push_back((i + 1) % interval ? LayerKind::kDeltaNet : LayerKind::kAttention);
  }
  const uint32_t d4 = 4, d16 = 16, d32 = 32, d128 = 128;
  c.delta_net.conv_kernel = r.positive_int("linear_conv_kernel_dim", &d4);
  c.delta_net.qk_head_dim = r.positive_int("linear_key_head_dim", &d128);
  c.delta_net.v_head_dim = r.positive_int("linear_value_head_dim", &d128);
  c.delta_net.qk_heads = r.positive_int("linear_num_key_heads", &d16);
  c.delta_net.v_heads = r.positive_int("linear_num_value_heads", &d32);
}

// The mixture-of-experts fields, with transformers' defaults. Qwen3-MoE: a layer's MLP is a
// mixture unless mlp_only_layers names it or (layer + 1) is not a multiple of
// decoder_sparse_step; norm_topk_prob decides the renormalisation. Qwen3.5-MoE: every MLP
// is a mixture with a gated shared expert, the top-k weights always renormalised.
void read_moe(const ConfigReader& r, ModelConfig& c) {
  const bool qwen35 = c.model_type == "qwen3_5_moe";
  MoeShape& m = c.moe;
  // transformers 5 writes Qwen3-MoE's num_experts under its alias num_local_experts.
  const uint32_t default_experts = qwen35 ? 256 : 128;
  const uint32_t experts = r.positive_int("num_local_experts", &default_experts);
  m.num_experts = r.positive_int("num_experts", &experts);
  const uint32_t eight = 8, default_width = qwen35 ? 512 : 768;
  m.experts_per_token = r.positive_int("num_experts_per_tok", &eight);
  m.expert_intermediate = r.positive_int("moe_intermediate_size", &default_width);
  if (m.experts_per_token > m.num_experts)
    r.fail(fmt::format("'num_experts_per_tok' ({}) exceeds the number of experts ({})",
                       m.experts_per_token, m.num_experts));
  if (const nlohmann::json* scoring = r.get("scoring_func");
      scoring && !(scoring->is_string() && scoring->get_ref<const std::string&>() == "softmax"))
    r.fail("'scoring_func' is " + describe_json(*scoring) +
           ": only the softmax router of Qwen3 / Qwen3.5 MoE is built");
  if (qwen35) {
    const uint32_t shared = 512;
    m.shared_intermediate = r.positive_int("shared_expert_intermediate_size", &shared);
    m.normalise_top_k = true;
    c.mlp_kinds.assign(c.num_layers, MlpKind::kExperts);
    return;
  }
  m.normalise_top_k = r.boolean("norm_topk_prob", false);
  const uint32_t one = 1;
  const uint32_t step = r.positive_int("decoder_sparse_step", &one);
  c.mlp_kinds.assign(c.num_layers, MlpKind::kDense);
  for (uint32_t i = 0; i < c.num_layers; ++i)
    if ((i + 1) % step == 0) c.mlp_kinds[i] = MlpKind::kExperts;
  if (const nlohmann::json* dense = r.get("mlp_only_layers")) {
    if (!dense->is_array()) r.fail("'mlp_only_layers' must be an array of layer ids");
    for (const nlohmann::json& id : *dense) {
      if (!id.is_number() || !json_int(id) || *json_int(id) < 0 || *json_int(id) >= c.num_layers)
        r.fail(fmt::format("'mlp_only_layers' holds {}, not a layer id in [0, {})",
                           describe_json(id), c.num_layers));
      c.mlp_kinds[size_t(*json_int(id))] = MlpKind::kDense;
    }
  }
}

// Why hsring's own forward does not run `model_type`, naming what is missing, and the way
// such a model still feeds a drafter.
std::string not_built(const std::string& model_type, const ConfigReader& r) {
  std::string what;
  if (model_type == "gpt_oss")
    what =
        "gpt-oss (attention sinks, alternating sliding-window layers, its biased, clamped "
        "expert MLPs) is not built into hsring's forward";
  else if (r.get("kv_lora_rank") || model_type.rfind("deepseek", 0) == 0)
    what = "DeepSeek-style multi-head latent attention (MLA) is not built into hsring's forward";
  else
    what = "model_type '" + model_type +
           "' is not supported by hsring's forward (llama, qwen2, qwen3, qwen3_moe, qwen3_5, "
           "qwen3_5_text, qwen3_5_moe, qwen3_5_moe_text)";
  return what + "; run the targets through --target-cmd (examples/hf_target.py)";
}

}  // namespace

ModelConfig parse_hf_config(std::string_view json_text, const std::string& source) {
  const nlohmann::json root = parse_json(json_text, source);
  if (!root.is_object()) throw Error(Errc::kModelBadConfig, source + ": not a JSON object");
  const ConfigReader top(root, source);
  ModelConfig c;
  c.name = source;
  c.model_type = top.string("model_type");
  // Qwen3.5: the multimodal wrapper (model_type qwen3_5 / qwen3_5_moe) keeps the text
  // model's fields in text_config and its tensors under model.language_model.; a text-only
  // save (qwen3_5_text / qwen3_5_moe_text) has them at the top and under model.
  const nlohmann::json* text = &root;
  std::string text_source = source;
  if (is_qwen35(c.model_type)) {
    text = top.get("text_config");
    if (!text || !text->is_object())
      top.fail("'text_config' must be an object for " + c.model_type);
    text_source = source + ": text_config";
    c.weight_prefix = "model.language_model.";
  } else if (c.model_type == "qwen3_5_text" || c.model_type == "qwen3_5_moe_text") {
    c.model_type.resize(c.model_type.size() - 5);  // drop "_text"
  } else if (c.model_type != "llama" && c.model_type != "qwen2" && c.model_type != "qwen3" &&
             c.model_type != "qwen3_moe") {
    top.fail(not_built(c.model_type, top));
  }
  const ConfigReader r(*text, text_source);
  const bool experts = c.model_type == "qwen3_moe" || c.model_type == "qwen3_5_moe";
  c.hidden_size = r.positive_int("hidden_size");
  // Qwen3-MoE's dense layers (mlp_only_layers) are intermediate_size wide, 6144 unless
  // given; Qwen3.5-MoE has none.
  const uint32_t moe_dense_width = 6144;
  if (c.model_type == "qwen3_moe")
    c.intermediate_size = r.positive_int("intermediate_size", &moe_dense_width);
  else if (!experts)
    c.intermediate_size = r.positive_int("intermediate_size");
  c.num_layers = r.positive_int("num_hidden_layers");
  c.num_heads = r.positive_int("num_attention_heads");
  c.num_kv_heads = r.positive_int("num_key_value_heads", &c.num_heads);
  const bool qwen35 = is_qwen35(c.model_type);
  const uint32_t derived_head_dim = qwen35 ? 256 : c.hidden_size / c.num_heads;
  c.head_dim = r.positive_int("head_dim", &derived_head_dim);
  c.vocab_size = r.positive_int("vocab_size");
  read_rope(r, c);
  // Unused by the default RoPE, but 0 or -1 says the file is not what it claims to be.
  const uint32_t any_length = 1;
  (void)r.positive_int("max_position_embeddings", &any_length);
  c.rms_norm_eps = r.positive_number("rms_norm_eps", 1e-6);
  // The wrapper's own flag decides (transformers ties at the top level).
  c.tie_embeddings = top.boolean("tie_word_embeddings", r.boolean("tie_word_embeddings", false));
  c.qk_norm = c.model_type == "qwen3" || c.model_type == "qwen3_moe";
  c.qkv_bias = c.model_type == "qwen2";
  if (qwen35) read_qwen35(r, c);
  if (experts) read_moe(r, c);
  reject_unsupported(r, c.model_type);
  if (std::string why = validate_config(c); !why.empty()) r.fail(why);
  return c;
}

ModelConfig load_hf_config(const std::filesystem::path& config_json) {
  return parse_hf_config(read_model_text_file(config_json), config_json.string());
}

ModelConfig parse_hf_outline(std::string_view json_text, const std::string& source,
                             const std::string& why_not_native) {
  const nlohmann::json root = parse_json(json_text, source);
  if (!root.is_object()) throw Error(Errc::kModelBadConfig, source + ": not a JSON object");
  const ConfigReader top(root, source);
  ModelConfig c;
  c.name = source;
  c.model_type = top.string("model_type");
  c.no_native_forward = why_not_native;
  // A multimodal wrapper keeps its text model's fields in text_config (transformers'
  // get_text_config) and, saved by transformers 5, its tensors under model.language_model.
  const nlohmann::json* text = &root;
  std::string text_source = source;
  if (const nlohmann::json* t = top.get("text_config")) {
    if (!t->is_object()) top.fail("'text_config' must be an object");
    text = t;
    text_source = source + ": text_config";
    c.weight_prefix = "model.language_model.";
  }
  const ConfigReader r(*text, text_source);
  c.hidden_size = r.positive_int("hidden_size");
  c.vocab_size = r.positive_int("vocab_size");
  c.num_layers = r.positive_int("num_hidden_layers");
  c.num_heads = r.positive_int("num_attention_heads");
  c.num_kv_heads = r.positive_int("num_key_value_heads", &c.num_heads);
  const uint32_t derived_head_dim = std::max(c.hidden_size / c.num_heads, 1u);
  c.head_dim = r.positive_int("head_dim", &derived_head_dim);
  const uint32_t no_width = 0;
  c.intermediate_size = r.positive_int("intermediate_size", &no_width);
  // The base of the drafter's own RoPE (and of its export): rope_theta, else the theta of
  // rope_parameters or of its full-attention entry (per-layer-type RoPE), else 1e4.
  c.rope_theta = r.positive_number("rope_theta", 10000.0);
  if (const nlohmann::json* rope = r.get("rope_parameters"); rope && rope->is_object()) {
    const nlohmann::json* full = json_member(*rope, "full_attention");
    const nlohmann::json* own = json_member(*rope, "rope_theta");
    if (!own && full && full->is_object()) own = json_member(*full, "rope_theta");
    c.rope_theta = r.positive_number(own && !own->is_null() ? own : nullptr,
                                     "rope_parameters.rope_theta", c.rope_theta);
  }
  c.rms_norm_eps = r.positive_number("rms_norm_eps", 1e-6);
  c.tie_embeddings = top.boolean("tie_word_embeddings", r.boolean("tie_word_embeddings", false));
  if (std::string why = validate_config(c); !why.empty()) r.fail(why);
  return c;
}

}  // namespace hsring
