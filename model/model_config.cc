#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <optional>

#include "model/json.h"
#include "model/model_error.h"
#include "model/text_file.h"

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

// Field readers: each names the source and the key in its error.
class ConfigReader {
 public:
  ConfigReader(const JsonValue& root, const std::string& source) : root_(root), source_(source) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw ModelError(ModelErrc::kBadConfig, source_ + ": " + what);
  }

  // Absent and null read the same: HF writes `"head_dim": null` for "derive it".
  const JsonValue* get(std::string_view key) const {
    const JsonValue* v = root_.find(key);
    return v && !v->is_null() ? v : nullptr;
  }

  uint32_t positive_int(std::string_view key, const uint32_t* fallback = nullptr) const {
    const JsonValue* v = get(key);
    if (!v) {
      if (fallback) return *fallback;
      fail("required field '" + std::string(key) + "' is missing");
    }
    if (!v->is_number() || !v->as_int() || *v->as_int() < 1 ||
        *v->as_int() > std::numeric_limits<int32_t>::max())
      fail("'" + std::string(key) + "' must be a positive integer, got " + describe_json(*v));
    return uint32_t(*v->as_int());
  }

  double positive_number(const JsonValue* v, std::string_view key, double fallback) const {
    if (!v) return fallback;
    if (!v->is_number() || !(v->as_double() > 0))
      fail("'" + std::string(key) + "' must be a positive number, got " + describe_json(*v));
    return v->as_double();
  }

  double positive_number(std::string_view key, double fallback) const {
    return positive_number(get(key), key, fallback);
  }

  bool boolean(std::string_view key, bool fallback) const {
    const JsonValue* v = get(key);
    if (!v) return fallback;
    if (!v->is_bool())
      fail("'" + std::string(key) + "' must be true or false, got " + describe_json(*v));
    return v->as_bool();
  }

  std::string string(std::string_view key) const {
    const JsonValue* v = get(key);
    if (!v) fail("required field '" + std::string(key) + "' is missing");
    if (!v->is_string())
      fail("'" + std::string(key) + "' must be a string, got " + describe_json(*v));
    return v->as_string();
  }

  void require_false(std::string_view key, const std::string& why) const {
    if (boolean(key, false)) fail("'" + std::string(key) + "' is true: " + why);
  }

 private:
  const JsonValue& root_;
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
double rope_number(const ConfigReader& r, const JsonValue& rope, const std::string& field,
                   std::string_view key, std::optional<double> fallback = std::nullopt) {
  const JsonValue* v = rope.find(key);
  const std::string name = "'" + field + "." + std::string(key) + "'";
  if (!v || v->is_null()) {
    if (!fallback) r.fail(name + " is required by this rope_type");
    return *fallback;
  }
  if (!v->is_number() || !std::isfinite(v->as_double()))
    r.fail(name + " must be a number, got " + describe_json(*v));
  return v->as_double();
}

// original_max_position_embeddings of llama3 / yarn: the RoPE object's, else the top-level
// one, else max_position_embeddings (how transformers standardises it).
double original_positions(const ConfigReader& r, const JsonValue& rope, const std::string& field) {
  const JsonValue* own = rope.find("original_max_position_embeddings");
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

// The RoPE rule. transformers 4 writes rope_theta and rope_scaling ({"rope_type" or "type",
// factor, ...}); transformers 5 writes rope_parameters (the same keys and rope_theta). As
// transformers reads them: a non-empty rope_scaling wins over rope_parameters, theta comes
// from the chosen object, else from rope_theta, else 1e4. Types other than default, linear,
// dynamic, yarn and llama3 are refused, naming the type.
void read_rope(const ConfigReader& r, ModelConfig& c) {
  const bool qwen35 = c.model_type == "qwen3_5";
  c.rope_theta = r.positive_number("rope_theta", 10000.0);
  const JsonValue* rope = nullptr;
  std::string field;
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    const JsonValue* v = r.get(key);
    if (!v) continue;
    if (!v->is_object())
      r.fail("'" + std::string(key) + "' must be an object or null, got " + describe_json(*v));
    if (!rope && !v->as_object().empty()) {
      rope = v;
      field = key;
    }
  }
  // Partial RoPE: Qwen3.5 rotates the first quarter of each head (its default, as
  // transformers sets it); the rope object's own factor wins over the top-level one.
  double partial = qwen35 ? 0.25 : 1.0;
  if (const JsonValue* v = r.get("partial_rotary_factor")) {
    if (!v->is_number() || !(v->as_double() > 0 && v->as_double() <= 1))
      r.fail("'partial_rotary_factor' must be a number in (0, 1], got " + describe_json(*v));
    partial = v->as_double();
  }
  const auto set_rotary = [&](double factor) {
    if (factor == 1.0) {
      c.rotary_dim = 0;
      return;
    }
    if (!qwen35)
      r.fail("'partial_rotary_factor' is " + std::to_string(factor) +
             ": only RoPE over the whole head is supported for " + c.model_type);
    c.rotary_dim = uint32_t(double(c.head_dim) * factor);  // int() in transformers
  };
  set_rotary(partial);
  if (!rope) return;
  for (const auto& [key, value] : rope->as_object()) {
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
    const JsonValue* v = rope->find(key);
    if (!v || v->is_null()) continue;
    if (!v->is_string())
      r.fail("'" + field + "." + key + "' must be a string, got " + describe_json(*v));
    type = v->as_string();
    break;
  }
  c.rope_theta = r.positive_number(rope->find("rope_theta"), field + ".rope_theta", c.rope_theta);
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
    const JsonValue* factor = rope->find("factor");
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
    if (const JsonValue* t = rope->find("truncate"); t && !t->is_null()) {
      if (!t->is_bool()) r.fail("'" + field + ".truncate' must be true or false");
      s.truncate = t->as_bool();
    }
    // cos / sin scale: attention_factor, else mscale's ratio, else 0.1 ln(factor) + 1.
    const auto mscale = [](double scale, double m) {
      return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
    };
    const double m = rope_number(r, *rope, field, "mscale", 0.0);
    const double m_all = rope_number(r, *rope, field, "mscale_all_dim", 0.0);
    if (const JsonValue* a = rope->find("attention_factor"); a && !a->is_null())
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
  if (const JsonValue* act = r.get("hidden_act");
      act && !(act->is_string() && act->as_string() == "silu"))
    r.fail("'hidden_act' is " + describe_json(*act) + ": only \"silu\" (SwiGLU) is supported");
  // Qwen2's q/k/v biases come with its model_type (transformers ignores this flag there);
  // elsewhere the flag biases o_proj too, which the forward does not implement.
  if (model_type != "qwen2")
    r.require_false("attention_bias",
                    "biased q/k/v/o projections are not supported (only "
                    "qwen2's q/k/v biases are)");
  r.require_false("mlp_bias", "biased MLP projections are not supported");
  r.require_false("use_sliding_window", "sliding-window attention is not supported");
  if (model_type == "qwen3_5") return;  // its layer_types are read by read_qwen35
  if (const JsonValue* types = r.get("layer_types")) {
    if (!types->is_array()) r.fail("'layer_types' must be an array");
    for (const JsonValue& t : types->as_array())
      if (!(t.is_string() && t.as_string() == "full_attention"))
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
  if (const JsonValue* types = r.get("layer_types")) {
    if (!types->is_array()) r.fail("'layer_types' must be an array");
    for (const JsonValue& t : types->as_array()) {
      if (t.is_string() && t.as_string() == "full_attention")
        c.layer_kinds.push_back(LayerKind::kAttention);
      else if (t.is_string() && t.as_string() == "linear_attention")
        c.layer_kinds.push_back(LayerKind::kDeltaNet);
      else
        r.fail("'layer_types' holds " + describe_json(t) +
               ": only \"full_attention\" and \"linear_attention\" layers are supported");
    }
    if (c.layer_kinds.size() != c.num_layers)
      r.fail("'layer_types' lists " + std::to_string(c.layer_kinds.size()) + " layers, " +
             "'num_hidden_layers' is " + std::to_string(c.num_layers));
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

}  // namespace

std::string validate_config(const ModelConfig& c) {
  const auto in_range = [](uint32_t v, uint32_t hi) { return v >= 1 && v <= hi; };
  if (!in_range(c.hidden_size, 65536)) return "hidden size must be in [1, 65536]";
  if (!in_range(c.intermediate_size, 1u << 20)) return "intermediate size must be in [1, 2^20]";
  if (!in_range(c.num_layers, 1024)) return "layer count must be in [1, 1024]";
  if (!in_range(c.num_heads, 1024)) return "attention head count must be in [1, 1024]";
  if (!in_range(c.num_kv_heads, c.num_heads))
    return "KV head count must be in [1, num_heads = " + std::to_string(c.num_heads) + "]";
  if (c.num_heads % c.num_kv_heads != 0)
    return "attention heads (" + std::to_string(c.num_heads) +
           ") must be a multiple of KV heads (" + std::to_string(c.num_kv_heads) + ")";
  if (!in_range(c.head_dim, 1024) || c.head_dim % 2 != 0)
    return "head dim must be even and in [2, 1024] (RoPE rotates pairs)";
  if (!in_range(c.vocab_size, uint32_t(std::numeric_limits<int32_t>::max())))
    return "vocab size must be in [1, 2^31 - 1] (token ids are int32)";
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta)) return "rope theta must be positive";
  if (!(c.rms_norm_eps > 0) || !std::isfinite(c.rms_norm_eps))
    return "RMS norm eps must be positive";
  if (c.model_type != "llama" && c.model_type != "qwen2" && c.model_type != "qwen3" &&
      c.model_type != "qwen3_5")
    return "model type '" + c.model_type + "' is not supported (llama, qwen2, qwen3, qwen3_5)";
  if (!c.layer_kinds.empty() && c.layer_kinds.size() != c.num_layers)
    return "layer kinds list " + std::to_string(c.layer_kinds.size()) + " layers, not " +
           std::to_string(c.num_layers);
  if (c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim)
    return "rotary dim " + std::to_string(c.rotary_dim) + " must be even and at most the head dim";
  if (c.hybrid()) {
    const DeltaNetShape& d = c.delta_net;
    if (!in_range(d.qk_heads, 1024) || !in_range(d.v_heads, 1024) ||
        !in_range(d.qk_head_dim, 1024) || !in_range(d.v_head_dim, 1024))
      return "DeltaNet head counts and sizes must be in [1, 1024]";
    if (d.v_heads % d.qk_heads != 0)
      return "DeltaNet value heads (" + std::to_string(d.v_heads) +
             ") must be a multiple of its key heads (" + std::to_string(d.qk_heads) + ")";
    if (!in_range(d.conv_kernel, 64)) return "DeltaNet convolution kernel must be in [1, 64]";
  }
  if (std::string why = validate_rope(c.rope); !why.empty()) return why;
  if (c.rope.type == RopeType::kDynamic && c.rope_dim() < 4)
    return "dynamic RoPE needs a rotary dim of at least 4";
  return "";
}

std::vector<std::string> named_model_configs() {
  return {"tiny", "qwen3-8b", "qwen3.6-27b", "qwen3-dense-27b"};
}

ModelConfig named_model_config(std::string_view name) {
  if (name == "tiny") return tiny_config();
  if (name == "qwen3-8b") return qwen3_8b_config();
  if (name == "qwen3.6-27b") return qwen36_27b_config();
  if (name == "qwen3-dense-27b") return dense_27b_config();
  std::string known;
  for (const std::string& n : named_model_configs()) known += (known.empty() ? "" : ", ") + n;
  throw ModelError(ModelErrc::kBadConfig,
                   "unknown model shape '" + std::string(name) + "' (known: " + known + ")");
}

ModelConfig parse_hf_config(std::string_view json_text, const std::string& source) {
  const JsonValue root = parse_json(json_text, source);
  if (!root.is_object()) throw ModelError(ModelErrc::kBadConfig, source + ": not a JSON object");
  const ConfigReader top(root, source);
  ModelConfig c;
  c.name = source;
  c.model_type = top.string("model_type");
  // Qwen3.5: the multimodal wrapper (model_type qwen3_5) keeps the text model's fields in
  // text_config and its tensors under model.language_model.; a text-only save
  // (qwen3_5_text) has them at the top and under model.
  const JsonValue* text = &root;
  std::string text_source = source;
  if (c.model_type == "qwen3_5") {
    text = top.get("text_config");
    if (!text || !text->is_object()) top.fail("'text_config' must be an object for qwen3_5");
    text_source = source + ": text_config";
    c.weight_prefix = "model.language_model.";
  } else if (c.model_type == "qwen3_5_text") {
    c.model_type = "qwen3_5";
  } else if (c.model_type != "llama" && c.model_type != "qwen2" && c.model_type != "qwen3") {
    top.fail("model_type '" + c.model_type +
             "' is not supported (llama, qwen2, qwen3, qwen3_5, qwen3_5_text)");
  }
  const ConfigReader r(*text, text_source);
  c.hidden_size = r.positive_int("hidden_size");
  c.intermediate_size = r.positive_int("intermediate_size");
  c.num_layers = r.positive_int("num_hidden_layers");
  c.num_heads = r.positive_int("num_attention_heads");
  c.num_kv_heads = r.positive_int("num_key_value_heads", &c.num_heads);
  const bool qwen35 = c.model_type == "qwen3_5";
  const uint32_t derived_head_dim = qwen35 ? 256 : c.hidden_size / c.num_heads;
  c.head_dim = r.positive_int("head_dim", &derived_head_dim);
  c.vocab_size = r.positive_int("vocab_size");
  read_rope(r, c);
  c.rms_norm_eps = r.positive_number("rms_norm_eps", 1e-6);
  // The wrapper's own flag decides (transformers ties at the top level).
  c.tie_embeddings = top.boolean("tie_word_embeddings", r.boolean("tie_word_embeddings", false));
  c.qk_norm = c.model_type == "qwen3";
  c.qkv_bias = c.model_type == "qwen2";
  if (qwen35) read_qwen35(r, c);
  reject_unsupported(r, c.model_type);
  if (std::string why = validate_config(c); !why.empty()) r.fail(why);
  return c;
}

ModelConfig load_hf_config(const std::filesystem::path& config_json) {
  return parse_hf_config(read_text_file(config_json), config_json.string());
}

std::vector<int32_t> default_capture_layers(uint32_t num_layers, uint32_t k) {
  if (k == 0 || k > num_layers)
    throw ModelError(ModelErrc::kBadConfig, "cannot capture " + std::to_string(k) +
                                                " distinct layers of a " +
                                                std::to_string(num_layers) + "-layer model");
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

bool ModelConfig::hybrid() const {
  return std::find(layer_kinds.begin(), layer_kinds.end(), LayerKind::kDeltaNet) !=
         layer_kinds.end();
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
  const uint64_t per_layer = 3 * h * c.intermediate_size + 2 * h;
  uint64_t total = 0;
  for (uint32_t i = 0; i < c.num_layers; ++i)
    total += per_layer + (c.kind(i) == LayerKind::kDeltaNet ? delta : attention);
  const uint64_t embed = uint64_t(c.vocab_size) * h;
  return total + embed * (c.tie_embeddings ? 1 : 2) + h;
}

}  // namespace hsring
