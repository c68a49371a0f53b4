// Property and fuzz tests of parse_hf_config: whatever the bytes, it returns a valid config
// or throws Error (kBadJson / kBadConfig) naming the source; the same model written by
// transformers 4 and 5 reads the same; member order never matters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/random.h"
#include "model/model_config.h"

namespace hsring {
namespace {

using Members = std::vector<std::pair<std::string, std::string>>;  // key, JSON value text

std::string render(const Members& members) {
  std::string text = "{";
  for (size_t i = 0; i < members.size(); ++i)
    text += (i ? ",\n  \"" : "\n  \"") + members[i].first + "\": " + members[i].second;
  return text + "\n}";
}

// meta-llama/Llama-3.1-8B-Instruct's config.json (transformers 4 style), as published.
Members llama31_8b() {
  return {{"architectures", "[\"LlamaForCausalLM\"]"},
          {"attention_bias", "false"},
          {"attention_dropout", "0.0"},
          {"bos_token_id", "128000"},
          {"eos_token_id", "[128001, 128008, 128009]"},
          {"hidden_act", "\"silu\""},
          {"hidden_size", "4096"},
          {"initializer_range", "0.02"},
          {"intermediate_size", "14336"},
          {"max_position_embeddings", "131072"},
          {"mlp_bias", "false"},
          {"model_type", "\"llama\""},
          {"num_attention_heads", "32"},
          {"num_hidden_layers", "32"},
          {"num_key_value_heads", "8"},
          {"pretraining_tp", "1"},
          {"rms_norm_eps", "1e-05"},
          {"rope_scaling",
           "{\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
           "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}"},
          {"rope_theta", "500000.0"},
          {"tie_word_embeddings", "false"},
          {"torch_dtype", "\"bfloat16\""},
          {"transformers_version", "\"4.43.0.dev0\""},
          {"use_cache", "true"},
          {"vocab_size", "128256"}};
}

// Qwen/Qwen2.5-7B-Instruct's config.json, as published.
Members qwen25_7b() {
  return {{"architectures", "[\"Qwen2ForCausalLM\"]"},
          {"attention_dropout", "0.0"},
          {"bos_token_id", "151643"},
          {"eos_token_id", "151645"},
          {"hidden_act", "\"silu\""},
          {"hidden_size", "3584"},
          {"initializer_range", "0.02"},
          {"intermediate_size", "18944"},
          {"max_position_embeddings", "32768"},
          {"max_window_layers", "28"},
          {"model_type", "\"qwen2\""},
          {"num_attention_heads", "28"},
          {"num_hidden_layers", "28"},
          {"num_key_value_heads", "4"},
          {"rms_norm_eps", "1e-06"},
          {"rope_theta", "1000000.0"},
          {"sliding_window", "131072"},
          {"tie_word_embeddings", "false"},
          {"torch_dtype", "\"bfloat16\""},
          {"transformers_version", "\"4.43.1\""},
          {"use_cache", "true"},
          {"use_sliding_window", "false"},
          {"vocab_size", "152064"}};
}

// Llama 3.1 as transformers 5 writes it: rope_parameters (with rope_theta) and dtype.
Members llama31_8b_v5() {
  Members m;
  for (auto& [k, v] : llama31_8b()) {
    if (k == "rope_theta" || k == "rope_scaling") continue;
    if (k == "torch_dtype") {
      m.emplace_back("dtype", v);
    } else if (k == "transformers_version") {
      m.emplace_back(k, "\"5.15.0\"");
    } else {
      m.emplace_back(k, v);
    }
  }
  m.emplace_back("rope_parameters",
                 "{\"factor\": 8.0, \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, "
                 "\"original_max_position_embeddings\": 8192, \"rope_theta\": 500000.0, "
                 "\"rope_type\": \"llama3\"}");
  return m;
}

void expect_same(const ModelConfig& a, const ModelConfig& b, const std::string& why);

// Qwen/Qwen3.6-27B's config.json, shaped as published (Qwen3_5ForConditionalGeneration;
// the vision tower's block shortened: it is not read).
std::string qwen36_27b_json(const std::string& text_extra = "", int layers = 64) {
  std::string types;
  for (int i = 0; i < layers; ++i)
    types +=
        std::string(i ? ", " : "") + ((i + 1) % 4 ? "\"linear_attention\"" : "\"full_attention\"");
  return R"({"architectures": ["Qwen3_5ForConditionalGeneration"], "image_token_id": 248056,
  "model_type": "qwen3_5", "text_config": {)" +
         text_extra + R"(
    "attention_bias": false, "attention_dropout": 0.0, "attn_output_gate": true,
    "dtype": "bfloat16", "eos_token_id": 248044, "full_attention_interval": 4, "head_dim": 256,
    "hidden_act": "silu", "hidden_size": 5120, "initializer_range": 0.02,
    "intermediate_size": 17408, "layer_types": [)" +
         types + R"(],
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
    "linear_num_value_heads": 48, "linear_value_head_dim": 128,
    "max_position_embeddings": 262144, "mamba_ssm_dtype": "float32",
    "model_type": "qwen3_5_text", "mtp_num_hidden_layers": 1, "num_attention_heads": 24,
    "num_hidden_layers": 64, "num_key_value_heads": 4, "partial_rotary_factor": 0.25,
    "rms_norm_eps": 1e-06, "rope_parameters": {"mrope_interleaved": true,
    "mrope_section": [11, 11, 10], "partial_rotary_factor": 0.25, "rope_theta": 10000000,
    "rope_type": "default"}, "use_cache": true, "vocab_size": 248320},
  "tie_word_embeddings": false, "transformers_version": "4.57.0.dev0",
  "video_token_id": 248057, "vision_config": {"depth": 27, "hidden_size": 1152},
  "vision_end_token_id": 248054, "vision_start_token_id": 248053})";
}

TEST(ModelConfigFuzzTest, Qwen36ConfigReadsAsThePreset) {
  const ModelConfig c = parse_hf_config(qwen36_27b_json(), "qwen36");
  const ModelConfig preset = named_model_config("qwen3.6-27b");
  expect_same(c, preset, "qwen3.6-27b");
  EXPECT_EQ(c.layer_kinds, preset.layer_kinds);
  EXPECT_EQ(c.rope_dim(), 64u);
  EXPECT_EQ(c.weight_prefix, "model.language_model.");
  EXPECT_TRUE(c.attention_gate && c.zero_centred_norms && c.qk_norm);
  EXPECT_EQ(c.delta_net.qk_heads, 16u);
  EXPECT_EQ(c.delta_net.v_heads, 48u);
  EXPECT_EQ(c.delta_net.conv_kernel, 4u);
  const auto refused = [](const std::string& text, const std::string& message) {
    try {
      parse_hf_config(text, "q/config.json");
      ADD_FAILURE() << "parsed, expected: " << message;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kModelBadConfig);
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("q/config.json: text_config"), std::string::npos)
          << e.what();
    }
  };
  refused(qwen36_27b_json("", 60), "'layer_types' lists 60 layers");
}

TEST(ModelConfigFuzzTest, Qwen35FieldsAreCheckedAndOtherModelsKeepTheirRules) {
  const auto error_of = [](const std::string& text) {
    try {
      parse_hf_config(text, "q/config.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("parsed");
  };
  std::string text = qwen36_27b_json();
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    return error_of(t);
  };
  EXPECT_NE(with("\"linear_num_value_heads\": 48", "\"linear_num_value_heads\": 40")
                .find("multiple of its key heads"),
            std::string::npos);
  EXPECT_NE(with("\"full_attention\"]", "\"sliding_attention\"]").find("\"sliding_attention\""),
            std::string::npos);
  EXPECT_NE(
      with("\"model_type\": \"qwen3_5\", \"text_config\"", "\"model_type\": \"qwen3_5\", \"text\"")
          .find("'text_config' must be an object"),
      std::string::npos);
  EXPECT_NE(with("\"attention_bias\": false", "\"attention_bias\": true").find("biased q/k/v/o"),
            std::string::npos);
  // mrope keys and partial RoPE belong to Qwen3.5 only.
  Members llama = llama31_8b();
  llama.emplace_back("partial_rotary_factor", "0.5");
  EXPECT_NE(error_of(render(llama)).find("only RoPE over the whole head"), std::string::npos);
  llama = llama31_8b_v5();
  llama.back().second = "{\"rope_type\": \"default\", \"mrope_section\": [1, 1, 2]}";
  EXPECT_NE(error_of(render(llama)).find("'rope_parameters.mrope_section' is not a RoPE"),
            std::string::npos);
}

// parse_hf_config's whole contract on one input: a valid config, or an Error of the
// two parse codes whose message starts with the source. Returns whether it parsed.
bool parses_or_fails_cleanly(const std::string& text) {
  try {
    const ModelConfig c = parse_hf_config(text, "fuzz/config.json");
    EXPECT_EQ(validate_config(c), "") << text;
    EXPECT_EQ(c.name, "fuzz/config.json");
    return true;
  } catch (const Error& e) {
    EXPECT_TRUE(e.code() == Errc::kModel || e.code() == Errc::kModelBadConfig) << text;
    EXPECT_EQ(std::string(e.what()).rfind("fuzz/config.json", 0), 0u) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an Error: " << e.what() << "\n" << text;
  }
  return false;
}

void expect_same(const ModelConfig& a, const ModelConfig& b, const std::string& why) {
  EXPECT_EQ(a.model_type, b.model_type) << why;
  EXPECT_EQ(a.hidden_size, b.hidden_size) << why;
  EXPECT_EQ(a.intermediate_size, b.intermediate_size) << why;
  EXPECT_EQ(a.num_layers, b.num_layers) << why;
  EXPECT_EQ(a.num_heads, b.num_heads) << why;
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads) << why;
  EXPECT_EQ(a.head_dim, b.head_dim) << why;
  EXPECT_EQ(a.vocab_size, b.vocab_size) << why;
  EXPECT_EQ(a.rope_theta, b.rope_theta) << why;
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps) << why;
  EXPECT_EQ(a.qk_norm, b.qk_norm) << why;
  EXPECT_EQ(a.qkv_bias, b.qkv_bias) << why;
  EXPECT_EQ(a.tie_embeddings, b.tie_embeddings) << why;
  EXPECT_EQ(a.rope.type, b.rope.type) << why;
  EXPECT_EQ(a.rope.factor, b.rope.factor) << why;
  EXPECT_EQ(a.rope.original_max_positions, b.rope.original_max_positions) << why;
  EXPECT_EQ(a.rope.max_positions, b.rope.max_positions) << why;
  EXPECT_EQ(a.rope.low_freq_factor, b.rope.low_freq_factor) << why;
  EXPECT_EQ(a.rope.high_freq_factor, b.rope.high_freq_factor) << why;
  EXPECT_EQ(a.rope.beta_fast, b.rope.beta_fast) << why;
  EXPECT_EQ(a.rope.beta_slow, b.rope.beta_slow) << why;
  EXPECT_EQ(a.rope.truncate, b.rope.truncate) << why;
  EXPECT_EQ(a.rope.attention_factor, b.rope.attention_factor) << why;
}

TEST(ModelConfigFuzzTest, PublishedConfigsParse) {
  const ModelConfig llama = parse_hf_config(render(llama31_8b()), "llama");
  EXPECT_EQ(llama.rope.type, RopeType::kLlama3);
  EXPECT_EQ(llama.rope.factor, 8.0);
  EXPECT_EQ(llama.rope.original_max_positions, 8192.0);
  EXPECT_EQ(llama.rope_theta, 5e5);
  EXPECT_FALSE(llama.qkv_bias);
  EXPECT_NEAR(double(parameter_count(llama)), 8.03e9, 0.01e9);
  const ModelConfig qwen2 = parse_hf_config(render(qwen25_7b()), "qwen2");
  EXPECT_TRUE(qwen2.qkv_bias);
  EXPECT_FALSE(qwen2.qk_norm);
  EXPECT_EQ(qwen2.head_dim, 128u);
  EXPECT_NEAR(double(parameter_count(qwen2)), 7.62e9, 0.01e9);
  expect_same(parse_hf_config(render(llama31_8b_v5()), "v5"), llama, "transformers 5");
}

// A random valid model, written as transformers 4 and as transformers 5 would, reads the
// same both ways and in any member order.
TEST(ModelConfigFuzzTest, Transformers4And5WritingsReadTheSame) {
  uint64_t state = 7;
  const auto below = [&state](uint64_t n) { return splitmix64(state) % n; };
  const char* types[] = {"llama", "qwen2", "qwen3"};
  const char* ropes[] = {"default", "linear", "dynamic", "yarn", "llama3"};
  for (int iteration = 0; iteration < 300; ++iteration) {
    const uint64_t kv = 1 + below(8);
    const uint64_t heads = kv * (1 + below(4));
    const uint64_t head_dim = 4 * (1 + below(64));
    const std::string theta = std::to_string(1000 * (1 + below(1000))) + ".0";
    const std::string rope = ropes[below(5)];
    std::string params = "\"rope_type\": \"" + rope + "\"";
    if (rope != "default") params += ", \"factor\": " + std::to_string(1 + below(16)) + ".5";
    if (rope == "llama3")
      params +=
          ", \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
          "\"original_max_position_embeddings\": 8192";
    if (rope == "yarn" && below(2))
      params += ", \"beta_fast\": 16, \"original_max_position_embeddings\": 2048";
    Members common = {
        {"model_type", std::string("\"") + types[below(3)] + "\""},
        {"hidden_size", std::to_string(64 * (1 + below(64)))},
        {"intermediate_size", std::to_string(1 + below(20000))},
        {"num_hidden_layers", std::to_string(1 + below(80))},
        {"num_attention_heads", std::to_string(heads)},
        {"num_key_value_heads", std::to_string(kv)},
        {"head_dim", std::to_string(head_dim)},
        {"vocab_size", std::to_string(1 + below(300000))},
        {"rms_norm_eps", below(2) ? "1e-06" : "1e-05"},
        {"tie_word_embeddings", below(2) ? "true" : "false"},
        {"max_position_embeddings", std::to_string(1024 * (1 + below(128)))},
    };
    Members v4 = common, v5 = common;
    v4.emplace_back("rope_theta", theta);
    v4.emplace_back("rope_scaling", rope == "default" && below(2) ? "null" : "{" + params + "}");
    v4.emplace_back("torch_dtype", "\"bfloat16\"");
    v5.emplace_back("rope_parameters", "{" + params + ", \"rope_theta\": " + theta + "}");
    v5.emplace_back("dtype", "\"bfloat16\"");
    const ModelConfig a = parse_hf_config(render(v4), "v4");
    const ModelConfig b = parse_hf_config(render(v5), "v5");
    expect_same(a, b, render(v4) + "\n" + render(v5));
    EXPECT_EQ(rope_type_name(a.rope.type), rope);
    std::shuffle(v5.begin(), v5.end(), std::mt19937_64(state));
    expect_same(parse_hf_config(render(v5), "shuffled"), b, render(v5));
  }
}

// Random values in place of, or instead of, each member of published configs, and random
// byte edits: never anything but a valid config or a clean Error.
TEST(ModelConfigFuzzTest, MutatedConfigsParseOrFailCleanly) {
  const std::vector<std::string> values = {
      "null",
      "true",
      "false",
      "0",
      "-1",
      "1",
      "2",
      "7",
      "64",
      "1.5",
      "0.5",
      "-0.0",
      "1e308",
      "1e-320",
      "9223372036854775807",
      "4294967296",
      "\"\"",
      "\"llama\"",
      "\"qwen2\"",
      "\"yarn\"",
      "[]",
      "[\"full_attention\"]",
      "[1, 2]",
      "{}",
      "{\"rope_type\": \"dynamic\"}",
      "{\"rope_type\": \"yarn\", \"factor\": null}",
      "{\"type\": \"linear\", \"factor\": 2}",
      "{\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 4, "
      "\"high_freq_factor\": 1}",
      "{\"rope_type\": \"yarn\", \"factor\": 4, \"truncate\": 3}"};
  const std::vector<std::string> extra_keys = {"rope_scaling",
                                               "rope_parameters",
                                               "partial_rotary_factor",
                                               "layer_types",
                                               "original_max_position_embeddings",
                                               "head_dim",
                                               "attention_bias",
                                               "use_sliding_window"};
  uint64_t state = 11;
  const auto below = [&state](uint64_t n) { return splitmix64(state) % n; };
  int parsed = 0, refused = 0;
  for (const Members& seed : {llama31_8b(), qwen25_7b(), llama31_8b_v5()}) {
    for (int iteration = 0; iteration < 1500; ++iteration) {
      Members m = seed;
      for (uint64_t edits = 1 + below(3); edits > 0; --edits) {
        switch (below(3)) {
          case 0:
            m.erase(m.begin() + long(below(m.size())));
            break;
          case 1:
            m[below(m.size())].second = values[below(values.size())];
            break;
          default:
            m.emplace_back(extra_keys[below(extra_keys.size())], values[below(values.size())]);
        }
      }
      std::string text = render(m);
      if (below(4) == 0) {
        // A byte edit: truncation, a deleted byte or a stray one.
        const size_t at = below(text.size());
        switch (below(3)) {
          case 0:
            text.resize(at);
            break;
          case 1:
            text.erase(at, 1);
            break;
          default:
            text.insert(at, 1, "{}[],:\"0e-\\\x80"[below(12)]);
        }
      }
      (parses_or_fails_cleanly(text) ? parsed : refused)++;
    }
  }
  // The nested Qwen3.5 config under byte edits and replaced numbers.
  const std::string qwen = qwen36_27b_json();
  for (int iteration = 0; iteration < 1500; ++iteration) {
    std::string text = qwen;
    const size_t at = below(text.size());
    switch (below(4)) {
      case 0:
        text.resize(at);
        break;
      case 1:
        text.erase(at, 1 + below(8));
        break;
      case 2:
        text.insert(at, 1, "{}[],:\"0e-\\\x80"[below(12)]);
        break;
      default: {
        const size_t digit = text.find_first_of("0123456789", at);
        if (digit != std::string::npos) text[digit] = "0123456789"[below(10)];
      }
    }
    (parses_or_fails_cleanly(text) ? parsed : refused)++;
  }
  // Both outcomes are exercised (the mutations are not all fatal, nor all harmless).
  EXPECT_GT(parsed, 200);
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace hsring
