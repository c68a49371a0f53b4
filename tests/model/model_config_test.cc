#include "model/model_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "common/error.h"
#include "test_files.h"

namespace hsring {
namespace {

// Qwen/Qwen3-8B's config.json, as published.
constexpr char kQwen3_8B[] = R"({
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 12288,
  "max_position_embeddings": 40960,
  "max_window_layers": 36,
  "model_type": "qwen3",
  "num_attention_heads": 32,
  "num_hidden_layers": 36,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// A Llama-style config without head_dim or num_key_value_heads: both derived.
constexpr char kLlamaMinimal[] = R"({
  "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
  "num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 1000,
  "rope_theta": 500000.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": true
})";

Error config_error(const std::string& text) {
  try {
    parse_hf_config(text, "cfg/config.json");
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "parsed: " << text;
  return Error(Errc::kModel, "");
}

// kQwen3_8B with one field replaced (or removed when `value` is empty).
std::string qwen_with(const std::string& key, const std::string& value) {
  std::string text = kQwen3_8B;
  const size_t at = text.find("\"" + key + "\": ");
  if (at == std::string::npos) {
    return "{\"" + key + "\": " + value + "," + text.substr(1);
  }
  const size_t end = text.find_first_of(",\n", text.find(':', at) + 2);
  const bool comma = text[end] == ',';
  const size_t line_end = comma ? end + 1 : end;
  const std::string replacement =
      value.empty() ? "" : "\"" + key + "\": " + value + (comma ? "," : "");
  return text.substr(0, at) + replacement + text.substr(line_end);
}

TEST(ModelConfigTest, ParsesQwen3_8BConfig) {
  const ModelConfig c = parse_hf_config(kQwen3_8B, "qwen/config.json");
  const ModelConfig preset = named_model_config("qwen3-8b");
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.hidden_size, preset.hidden_size);
  EXPECT_EQ(c.intermediate_size, preset.intermediate_size);
  EXPECT_EQ(c.num_layers, preset.num_layers);
  EXPECT_EQ(c.num_heads, preset.num_heads);
  EXPECT_EQ(c.num_kv_heads, preset.num_kv_heads);
  EXPECT_EQ(c.head_dim, preset.head_dim);
  EXPECT_EQ(c.vocab_size, preset.vocab_size);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_EQ(c.name, "qwen/config.json");
}

TEST(ModelConfigTest, DerivesHeadDimAndKvHeadsForLlama) {
  const ModelConfig c = parse_hf_config(kLlamaMinimal, "llama");
  EXPECT_EQ(c.head_dim, 32u);
  EXPECT_EQ(c.num_kv_heads, 8u);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  // "head_dim": null means "derive it", as HF writes it.
  std::string with_null = kLlamaMinimal;
  with_null.insert(1, "\"head_dim\": null,");
  EXPECT_EQ(parse_hf_config(with_null, "llama").head_dim, 32u);
}

TEST(ModelConfigTest, ReadsRopeParametersOfNewerTransformers) {
  const ModelConfig c =
      parse_hf_config(qwen_with("rope_theta", "")
                          .insert(1,
                                  "\"rope_parameters\": {\"rope_type\": \"default\", "
                                  "\"rope_theta\": 5000000},"),
                      "cfg");
  EXPECT_DOUBLE_EQ(c.rope_theta, 5e6);
  EXPECT_EQ(c.rope.type, RopeType::kDefault);
  EXPECT_EQ(config_error(qwen_with("rope_parameters", "{\"rope_type\": \"longrope\"}")).code(),
            Errc::kModelBadConfig);
}

TEST(ModelConfigTest, BadJsonIsAClearError) {
  const Error e = config_error("{\"hidden_size\": 4096,,}");
  EXPECT_EQ(e.code(), Errc::kModel);
  EXPECT_NE(std::string(e.what()).find("cfg/config.json: line 1"), std::string::npos) << e.what();
  EXPECT_EQ(config_error("[1, 2]").code(), Errc::kModelBadConfig);
}

TEST(ModelConfigTest, MissingOrMistypedFieldsNameTheField) {
  struct Case {
    std::string key, value, message;
  };
  const Case cases[] = {
      {"hidden_size", "", "required field 'hidden_size' is missing"},
      {"model_type", "", "required field 'model_type' is missing"},
      {"vocab_size", "\"lots\"", "'vocab_size' must be a positive integer, got \"lots\""},
      {"num_hidden_layers", "0", "'num_hidden_layers' must be a positive integer, got 0"},
      {"head_dim", "64.5", "'head_dim' must be a positive integer, got 64.5"},
      {"rms_norm_eps", "-1", "'rms_norm_eps' must be a positive number"},
      {"tie_word_embeddings", "\"no\"", "'tie_word_embeddings' must be true or false"},
      {"num_key_value_heads", "5", "must be a multiple of KV heads"},
      {"model_type", "\"qwen3_next\"", "model_type 'qwen3_next' is not supported"},
      {"rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8.0}",
       "'rope_scaling.low_freq_factor' is required"},
      {"rope_scaling", "{\"rope_type\": \"longrope\"}", "\"longrope\": not supported"},
      {"rope_scaling", "{\"type\": \"su\", \"factor\": 2}", "\"su\": not supported"},
      {"rope_scaling", "{\"rope_type\": \"linear\", \"factor\": 0.5}", "factor must be"},
      {"rope_scaling", "{\"rope_type\": \"linear\", \"factor\": 2, \"mrope_section\": [1]}",
       "'rope_scaling.mrope_section' is not a RoPE parameter"},
      {"rope_scaling", "\"yarn\"", "'rope_scaling' must be an object or null"},
      {"rope_parameters", "{\"full_attention\": {\"rope_type\": \"default\"}}",
       "per-layer-type RoPE"},
      {"partial_rotary_factor", "0.5", "only RoPE over the whole head"},
      {"hidden_act", "\"gelu\"", "only \"silu\""},
      {"attention_bias", "true", "biased q/k/v/o projections"},
      {"mlp_bias", "true", "biased MLP projections"},
      {"use_sliding_window", "true", "sliding-window attention"},
      {"layer_types", "[\"full_attention\", \"linear_attention\"]", "\"linear_attention\""},
      // Unused by the default RoPE, but no model has 0 or -1 positions (issue 33).
      {"max_position_embeddings", "0", "'max_position_embeddings' must be a positive integer"},
      {"max_position_embeddings", "-1", "'max_position_embeddings' must be a positive integer"},
  };
  for (const Case& c : cases) {
    const Error e = config_error(qwen_with(c.key, c.value));
    EXPECT_EQ(e.code(), Errc::kModelBadConfig) << c.key;
    EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cfg/config.json"), std::string::npos) << e.what();
  }
}

TEST(ModelConfigTest, LoadsFromFileAndReportsMissingFile) {
  test::TempDir dir;
  test::write_text(dir / "config.json", kQwen3_8B);
  EXPECT_EQ(load_hf_config(dir / "config.json").num_layers, 36u);
  try {
    load_hf_config(dir / "nope.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kModel);
    EXPECT_NE(std::string(e.what()).find("nope.json"), std::string::npos);
  }
}

TEST(ModelConfigTest, NamedShapesAreValidAndDocumented) {
  for (const std::string& name : named_model_configs()) {
    const ModelConfig c = named_model_config(name);
    EXPECT_EQ(validate_config(c), "") << name;
    EXPECT_EQ(c.name, name);
  }
  const ModelConfig tiny = named_model_config("tiny");
  EXPECT_EQ(tiny.vocab_size, 256u);
  EXPECT_EQ(tiny.hidden_size, 128u);
  EXPECT_EQ(tiny.num_kv_heads, 2u);
  const ModelConfig big = named_model_config("qwen3-dense-27b");
  EXPECT_EQ(big.hidden_size, 5120u);
  EXPECT_EQ(big.num_layers, 64u);
  EXPECT_TRUE(big.qk_norm);
  EXPECT_FALSE(big.hybrid());
  EXPECT_NEAR(double(parameter_count(big)), 24.7e9, 0.1e9);
  // Qwen3.6-27B's text model: 48 DeltaNet layers, a full-attention one every fourth.
  const ModelConfig hybrid = named_model_config("qwen3.6-27b");
  EXPECT_EQ(hybrid.model_type, "qwen3_5");
  ASSERT_EQ(hybrid.layer_kinds.size(), 64u);
  EXPECT_EQ(std::count(hybrid.layer_kinds.begin(), hybrid.layer_kinds.end(), LayerKind::kAttention),
            16);
  EXPECT_EQ(hybrid.kind(3), LayerKind::kAttention);
  EXPECT_EQ(hybrid.kind(4), LayerKind::kDeltaNet);
  EXPECT_EQ(hybrid.rope_dim(), 64u);
  EXPECT_EQ(hybrid.delta_net.v_dim(), 48u * 128u);
  EXPECT_EQ(hybrid.vocab_size, 248320u);
  // The published checkpoint holds 27.8e9 values, vision tower and MTP head included.
  EXPECT_NEAR(double(parameter_count(hybrid)), 26.9e9, 0.1e9) << parameter_count(hybrid);
  EXPECT_NEAR(double(parameter_count(named_model_config("qwen3-8b"))), 8.19e9, 0.01e9);
  try {
    named_model_config("gpt-5");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("known: tiny, qwen3-8b, qwen3.6-27b, qwen3-dense-27b"),
              std::string::npos);
  }
}

TEST(ModelConfigTest, HybridModelsCaptureFullAttentionLayers) {
  const ModelConfig q = named_model_config("qwen3.6-27b");
  EXPECT_EQ(capture_layers_for(q, 5), (std::vector<int32_t>{3, 15, 31, 47, 59}));  // SpecForge
  for (uint32_t k = 1; k <= 15; ++k)
    for (int32_t id : capture_layers_for(q, k))
      EXPECT_EQ(q.kind(uint32_t(id)), LayerKind::kAttention) << k << " " << id;
  EXPECT_EQ(capture_layers_for(q, 3), (std::vector<int32_t>{3, 31, 59}));
  EXPECT_EQ(capture_layers_for(q, 16).size(), 16u);  // more than 15: the dense rule
  const ModelConfig dense = named_model_config("qwen3-8b");
  EXPECT_EQ(capture_layers_for(dense, 5), default_capture_layers(36, 5));
}

TEST(ModelConfigTest, DefaultCaptureLayersFollowDFlash) {
  EXPECT_EQ(default_capture_layers(36, 5), (std::vector<int32_t>{1, 9, 17, 25, 33}));
  EXPECT_EQ(default_capture_layers(64, 5), (std::vector<int32_t>{1, 16, 31, 46, 61}));
  EXPECT_EQ(default_capture_layers(28, 3), (std::vector<int32_t>{1, 13, 25}));
  EXPECT_EQ(default_capture_layers(36, 1), (std::vector<int32_t>{18}));
  // Too few layers in [1, L-3]: spread over all layers instead, still distinct.
  // Tiny models: below the last layer (HF gives it after the final norm), all when asked.
  EXPECT_EQ(default_capture_layers(6, 5), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(default_capture_layers(2, 1), (std::vector<int32_t>{0}));
  EXPECT_EQ(default_capture_layers(2, 2), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(default_capture_layers(5, 5), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  for (uint32_t layers = 1; layers <= 80; ++layers) {
    for (uint32_t k = 1; k <= std::min(layers, 16u); ++k) {
      const std::vector<int32_t> ids = default_capture_layers(layers, k);
      ASSERT_EQ(ids.size(), k);
      for (size_t i = 0; i < ids.size(); ++i) {
        EXPECT_GE(ids[i], 0);
        EXPECT_LT(ids[i], int32_t(layers));
        if (i) {
          EXPECT_GT(ids[i], ids[i - 1]) << layers << " " << k;
        }
        if (k < layers) {
          EXPECT_LT(ids[i], int32_t(layers) - 1) << "the last layer, " << layers << " " << k;
        }
      }
    }
  }
  EXPECT_THROW(default_capture_layers(4, 5), Error);
  EXPECT_THROW(default_capture_layers(36, 0), Error);
}

}  // namespace
}  // namespace hsring
