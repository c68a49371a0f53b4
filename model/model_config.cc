#include "model/model_config.h"

#include <cmath>
#include <limits>

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

ModelConfig qwen36_27b_config() {
  // A dense, full-attention stand-in of the 27B class: Qwen3-32B's attention (64 x 128,
  // 8 KV heads) with a narrower MLP, about 24.7e9 parameters. Real checkpoints are loaded
  // from their own config.json, which always wins over this preset.
  ModelConfig c;
  c.name = "qwen3.6-27b";
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

// RoPE theta from either the classic field or transformers v5's rope_parameters; any
// scaled variant (llama3, yarn, dynamic...) would change the frequencies: refused.
double read_rope_theta(const ConfigReader& r) {
  double theta = r.positive_number("rope_theta", 10000.0);
  if (const JsonValue* scaling = r.get("rope_scaling"))
    r.fail("'rope_scaling' is " + describe_json(*scaling) + ": only plain RoPE is supported");
  if (const JsonValue* params = r.get("rope_parameters")) {
    if (!params->is_object()) r.fail("'rope_parameters' must be an object");
    const JsonValue* type = params->find("rope_type");
    if (type && !(type->is_string() && type->as_string() == "default"))
      r.fail("'rope_parameters.rope_type' is " + describe_json(*type) +
             ": only plain RoPE (\"default\") is supported");
    theta = r.positive_number(params->find("rope_theta"), "rope_parameters.rope_theta", theta);
  }
  return theta;
}

void reject_unsupported(const ConfigReader& r) {
  if (const JsonValue* act = r.get("hidden_act");
      act && !(act->is_string() && act->as_string() == "silu"))
    r.fail("'hidden_act' is " + describe_json(*act) + ": only \"silu\" (SwiGLU) is supported");
  r.require_false("attention_bias", "biased q/k/v/o projections are not supported");
  r.require_false("mlp_bias", "biased MLP projections are not supported");
  r.require_false("use_sliding_window", "sliding-window attention is not supported");
  if (const JsonValue* types = r.get("layer_types")) {
    if (!types->is_array()) r.fail("'layer_types' must be an array");
    for (const JsonValue& t : types->as_array())
      if (!(t.is_string() && t.as_string() == "full_attention"))
        r.fail("'layer_types' holds " + describe_json(t) +
               ": only \"full_attention\" layers are supported");
  }
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
  if (c.model_type != "llama" && c.model_type != "qwen3")
    return "model type '" + c.model_type + "' is not supported (llama, qwen3)";
  return "";
}

std::vector<std::string> named_model_configs() { return {"tiny", "qwen3-8b", "qwen3.6-27b"}; }

ModelConfig named_model_config(std::string_view name) {
  if (name == "tiny") return tiny_config();
  if (name == "qwen3-8b") return qwen3_8b_config();
  if (name == "qwen3.6-27b") return qwen36_27b_config();
  std::string known;
  for (const std::string& n : named_model_configs()) known += (known.empty() ? "" : ", ") + n;
  throw ModelError(ModelErrc::kBadConfig,
                   "unknown model shape '" + std::string(name) + "' (known: " + known + ")");
}

ModelConfig parse_hf_config(std::string_view json_text, const std::string& source) {
  const JsonValue root = parse_json(json_text, source);
  if (!root.is_object()) throw ModelError(ModelErrc::kBadConfig, source + ": not a JSON object");
  const ConfigReader r(root, source);
  ModelConfig c;
  c.name = source;
  c.model_type = r.string("model_type");
  if (c.model_type != "llama" && c.model_type != "qwen3")
    r.fail("model_type '" + c.model_type + "' is not supported (llama, qwen3)");
  c.hidden_size = r.positive_int("hidden_size");
  c.intermediate_size = r.positive_int("intermediate_size");
  c.num_layers = r.positive_int("num_hidden_layers");
  c.num_heads = r.positive_int("num_attention_heads");
  c.num_kv_heads = r.positive_int("num_key_value_heads", &c.num_heads);
  const uint32_t derived_head_dim = c.hidden_size / c.num_heads;
  c.head_dim = r.positive_int("head_dim", &derived_head_dim);
  c.vocab_size = r.positive_int("vocab_size");
  c.rope_theta = read_rope_theta(r);
  c.rms_norm_eps = r.positive_number("rms_norm_eps", 1e-6);
  c.tie_embeddings = r.boolean("tie_word_embeddings", false);
  c.qk_norm = c.model_type == "qwen3";
  reject_unsupported(r);
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

uint64_t parameter_count(const ModelConfig& c) {
  const uint64_t h = c.hidden_size;
  const uint64_t attention = h * c.q_dim() * 2 + h * c.kv_dim() * 2;
  const uint64_t mlp = 3 * h * c.intermediate_size;
  const uint64_t norms = 2 * h + (c.qk_norm ? 2 * c.head_dim : 0);
  const uint64_t embed = uint64_t(c.vocab_size) * h;
  return c.num_layers * (attention + mlp + norms) + embed * (c.tie_embeddings ? 1 : 2) + h;
}

}  // namespace hsring
