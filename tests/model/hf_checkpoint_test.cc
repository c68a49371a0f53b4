#include "model/hf_checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <string>

#include "common/error.h"
#include "model/cpu_target_model.h"
#include "model/float_convert.h"
#include "test_files.h"
#include "tests/common/special_files.h"

namespace hsring {
namespace {

// A small untied Llama-style config and a tied QK-norm one: both weight layouts.
ModelConfig llama_config() {
  ModelConfig c = named_model_config("tiny");
  c.name = "llama-test";
  c.model_type = "llama";
  c.qk_norm = false;
  c.tie_embeddings = false;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.head_dim = 8;
  c.vocab_size = 50;
  return c;
}

ModelConfig qwen_config() {
  ModelConfig c = llama_config();
  c.name = "qwen-test";
  c.model_type = "qwen3";
  c.qk_norm = true;
  c.tie_embeddings = true;
  return c;
}

void expect_same_weights(const ModelConfig& c, const ModelWeights& a, const ModelWeights& b,
                         float (*round)(float)) {
  std::vector<std::vector<float>> left, right;
  for_each_weight(
      c, a, [&](const std::string&, const std::vector<int64_t>&, const std::vector<float>& v) {
        left.push_back(v);
      });
  for_each_weight(
      c, b, [&](const std::string&, const std::vector<int64_t>&, const std::vector<float>& v) {
        right.push_back(v);
      });
  ASSERT_EQ(left.size(), right.size());
  for (size_t t = 0; t < left.size(); ++t) {
    ASSERT_EQ(left[t].size(), right[t].size());
    for (size_t i = 0; i < left[t].size(); ++i) ASSERT_EQ(round(left[t][i]), right[t][i]);
  }
}

float same(float v) { return v; }
float via_bf16(float v) { return bf16_to_float(float_to_bf16(v)); }
float via_fp16(float v) { return fp16_to_float(float_to_fp16(v)); }

Error load_error(const std::filesystem::path& folder, const ModelConfig& config) {
  try {
    load_hf_weights(folder, config);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "loaded " << folder;
  return Error(Errc::kModel, "");
}

TEST(HfCheckpointTest, LoadsSingleFileInEachDtype) {
  for (const ModelConfig& c : {llama_config(), qwen_config()}) {
    const ModelWeights w = random_weights(c, 11);
    struct Case {
      const char* dtype;
      float (*round)(float);
    };
    for (const Case& k : {Case{"F32", same}, Case{"BF16", via_bf16}, Case{"F16", via_fp16}}) {
      test::TempDir dir;
      test::write_model_folder(dir.path(), c, w, k.dtype);
      const ModelConfig loaded_config = load_hf_checkpoint_config(dir.path());
      EXPECT_EQ(loaded_config.qk_norm, c.qk_norm);
      EXPECT_EQ(loaded_config.tie_embeddings, c.tie_embeddings);
      expect_same_weights(c, w, load_hf_weights(dir.path(), loaded_config), k.round);
    }
  }
}

TEST(HfCheckpointTest, LoadsShardedCheckpoint) {
  const ModelConfig c = llama_config();
  const ModelWeights w = random_weights(c, 5);
  test::TempDir dir;
  test::write_model_folder(dir.path(), c, w, "BF16", 3);
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors"));
  expect_same_weights(c, w, load_hf_weights(dir.path(), c), via_bf16);
}

TEST(HfCheckpointTest, OpenCpuModelFromFolderMatchesRandomModel) {
  const ModelConfig c = qwen_config();
  test::TempDir dir;
  test::write_model_folder(dir.path(), c, random_weights(c, 3), "F32", 2);
  const auto from_folder = open_cpu_model(dir.path().string(), 0, {1});
  CpuTargetModel in_memory(c, random_weights(c, 3), {1});
  const std::vector<int32_t> tokens = {1, 2, 3, 4}, positions = {0, 1, 2, 3}, offsets = {0, 4};
  ForwardRequest request;
  request.capture_layers = {0, 1};
  ForwardOutput a, b;
  from_folder->forward({tokens, positions, offsets}, request, a);
  in_memory.forward({tokens, positions, offsets}, request, b);
  EXPECT_EQ(a.captured, b.captured);
  EXPECT_EQ(a.greedy, b.greedy);
}

TEST(HfCheckpointTest, TiedHeadIgnoresLmHeadAndUntiedNeedsIt) {
  const ModelConfig tied = qwen_config();
  ModelConfig untied = tied;
  untied.tie_embeddings = false;
  test::TempDir dir;
  // A checkpoint written untied (with lm_head.weight) loads as tied: the extra is ignored.
  test::write_model_folder(dir.path(), untied, random_weights(untied, 1), "F32");
  EXPECT_TRUE(load_hf_weights(dir.path(), tied).lm_head.empty());
  // One written tied lacks lm_head.weight: loading it untied names the tensor.
  test::TempDir dir2;
  test::write_model_folder(dir2.path(), tied, random_weights(tied, 1), "F32");
  const Error e = load_error(dir2.path(), untied);
  EXPECT_EQ(e.code(), Errc::kModel);
  EXPECT_NE(std::string(e.what()).find("'lm_head.weight'"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
}

TEST(HfCheckpointTest, ShapeMismatchNamesTensorAndFile) {
  const ModelConfig c = llama_config();
  test::TempDir dir;
  test::write_model_folder(dir.path(), c, random_weights(c, 1), "BF16");
  ModelConfig wider = c;
  wider.intermediate_size = 64;
  const Error e = load_error(dir.path(), wider);
  EXPECT_EQ(e.code(), Errc::kModel);
  EXPECT_NE(std::string(e.what()).find("'model.layers.0.mlp.gate_proj.weight'"), std::string::npos)
      << e.what();
  EXPECT_NE(std::string(e.what()).find("expected [64, 32]"), std::string::npos) << e.what();
}

// A Qwen3.5 checkpoint as the multimodal wrapper saves it: the text model under
// model.language_model., a vision tensor to ignore, norms stored as (multiplier - 1).
TEST(HfCheckpointTest, Qwen35WrapperLoadsWithItsNormsShifted) {
  test::TempDir dir;
  const std::string text = R"({"model_type": "qwen3_5", "tie_word_embeddings": false,
    "text_config": {"model_type": "qwen3_5_text", "hidden_size": 32, "intermediate_size": 48,
      "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
      "head_dim": 32, "vocab_size": 50, "layer_types": ["linear_attention", "full_attention"],
      "linear_num_key_heads": 1, "linear_num_value_heads": 2, "linear_key_head_dim": 8,
      "linear_value_head_dim": 4, "linear_conv_kernel_dim": 4,
      "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                          "partial_rotary_factor": 0.25}}})";
  test::write_text(dir / "config.json", text);
  const ModelConfig c = load_hf_checkpoint_config(dir.path());
  ASSERT_TRUE(c.hybrid());
  EXPECT_EQ(c.rope_dim(), 8u);
  const ModelWeights want = random_weights(c, 4);
  std::vector<test::TestTensor> tensors;
  for_each_weight(c, want,
                  [&](const std::string& name, const std::vector<int64_t>& shape,
                      const std::vector<float>& values) {
                    std::vector<float> stored = values;
                    if (stored_zero_centred(c, name))
                      for (float& v : stored) v -= 1.0f;  // exact: v is within 2x of 1
                    tensors.push_back(test::make_tensor(name, "F32", shape, stored));
                  });
  tensors.push_back(
      test::make_tensor("model.visual.blocks.0.attn.qkv.weight", "F32", {2, 2}, {1, 2, 3, 4}));
  test::write_safetensors(dir / "model.safetensors", tensors);
  expect_same_weights(c, want, load_hf_weights(dir.path(), c), same);
  EXPECT_TRUE(stored_zero_centred(c, "model.language_model.layers.1.self_attn.q_norm.weight"));
  EXPECT_FALSE(stored_zero_centred(c, "model.language_model.layers.0.linear_attn.norm.weight"));

  // A DeltaNet tensor of the wrong shape is named, with its file.
  for (test::TestTensor& t : tensors)
    if (t.name == "model.language_model.layers.0.linear_attn.conv1d.weight")
      t = test::make_tensor(t.name, "F32", {40, 1, 3}, std::vector<float>(120, 0.5f));
  test::write_safetensors(dir / "model.safetensors", tensors);
  const Error e = load_error(dir.path(), c);
  EXPECT_EQ(e.code(), Errc::kModel);
  EXPECT_NE(std::string(e.what()).find("'model.language_model.layers.0.linear_attn.conv1d.weight'"),
            std::string::npos)
      << e.what();
  EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
}

TEST(HfCheckpointTest, BrokenIndexes) {
  const ModelConfig c = llama_config();
  test::TempDir dir;
  test::write_model_folder(dir.path(), c, random_weights(c, 1), "F32", 2);
  const std::filesystem::path index = dir / "model.safetensors.index.json";
  const std::string good = [&] {
    std::ifstream in(index);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  const auto replace = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    text.replace(text.find(from), from.size(), to);
    test::write_text(index, text);
  };
  // A tensor the index does not list.
  replace("\"model.norm.weight\"", "\"model.norm.unused\"");
  Error e = load_error(dir.path(), c);
  EXPECT_EQ(e.code(), Errc::kModel);
  EXPECT_NE(std::string(e.what()).find("'model.norm.weight'"), std::string::npos) << e.what();
  // A shard that does not exist.
  replace("model-00002-of-00002", "model-00003-of-00002");
  e = load_error(dir.path(), c);
  EXPECT_EQ(e.code(), Errc::kModel);
  EXPECT_NE(std::string(e.what()).find("model-00003-of-00002.safetensors"), std::string::npos);
  // An index pointing to a tensor its shard lacks.
  replace("\"model.norm.weight\":\"model-00002-of-00002.safetensors\"",
          "\"model.norm.weight\":\"model-00001-of-00002.safetensors\"");
  e = load_error(dir.path(), c);
  EXPECT_EQ(e.code(), Errc::kModel);
  EXPECT_NE(std::string(e.what()).find("model-00001-of-00002.safetensors"), std::string::npos);
  // A shard path leaving the folder.
  replace("model-00002-of-00002", "../model-00002-of-00002");
  EXPECT_EQ(load_error(dir.path(), c).code(), Errc::kModel);
  // Not JSON, and no weight_map.
  test::write_text(index, "{\"weight_map\": {");
  EXPECT_EQ(load_error(dir.path(), c).code(), Errc::kModel);
  test::write_text(index, "{\"metadata\": {}}");
  EXPECT_EQ(load_error(dir.path(), c).code(), Errc::kModel);
}

TEST(HfCheckpointTest, EmptyFolderAndMissingConfig) {
  test::TempDir dir;
  const Error e = load_error(dir.path(), llama_config());
  EXPECT_EQ(e.code(), Errc::kModel);
  EXPECT_NE(std::string(e.what()).find("no model.safetensors"), std::string::npos);
  EXPECT_THROW(load_hf_checkpoint_config(dir.path()), Error);
  EXPECT_THROW(open_cpu_model((dir / "absent").string()), Error);
}

// model_type "llama" over Qwen3 weights loaded, leaving every q_norm / k_norm unread: the
// forward silently differed from the model's (issue 33).
TEST(HfCheckpointTest, ALlamaConfigOverQwen3WeightsIsRefusedNamingAnUnusedNorm) {
  const ModelConfig qwen = qwen_config();
  test::TempDir dir;
  test::write_model_folder(dir.path(), qwen, random_weights(qwen, 1), "F32");
  ModelConfig as_llama = qwen;
  as_llama.model_type = "llama";
  as_llama.qk_norm = false;
  test::write_text(dir / "config.json", test::config_json(as_llama));
  const ModelConfig read = load_hf_checkpoint_config(dir.path());
  ASSERT_FALSE(read.qk_norm);
  const Error e = load_error(dir.path(), read);
  EXPECT_EQ(e.code(), Errc::kModelBadConfig) << e.what();
  EXPECT_NE(std::string(e.what()).find("'model.layers.0.self_attn.k_norm.weight' first"),
            std::string::npos)
      << e.what();
  EXPECT_NE(std::string(e.what()).find("does not use 4 tensor(s) of its layers"), std::string::npos)
      << e.what();
  // RoPE's saved inverse frequencies are no architecture's: still loaded.
  test::TempDir old;
  const ModelConfig llama = llama_config();
  test::write_model_folder(old.path(), llama, random_weights(llama, 1), "F32");
  std::vector<test::TestTensor> tensors;
  ModelWeights w = random_weights(llama, 1);
  for_each_weight(llama, w,
                  [&](const std::string& name, const std::vector<int64_t>& shape,
                      const std::vector<float>& values) {
                    tensors.push_back(test::make_tensor(name, "F32", shape, values));
                  });
  tensors.push_back(
      test::make_tensor("model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {4}, {1, 2, 3, 4}));
  test::write_safetensors(old / "model.safetensors", tensors);
  EXPECT_NO_THROW(load_hf_weights(old.path(), llama));
}

// An all-NaN target gave `hsring eval` tau 3.0 and "matches greedy" (issue 33).
TEST(HfCheckpointTest, ANonFiniteWeightIsRefusedNamingTheTensorAndTheElement) {
  const ModelConfig c = llama_config();
  for (const std::string dtype : {"F32", "BF16", "F16"}) {
    for (const float bad : {std::nanf(""), INFINITY, -INFINITY}) {
      ModelWeights w = random_weights(c, 1);
      w.layers[1].up_proj[5] = bad;
      test::TempDir dir;
      test::write_model_folder(dir.path(), c, w, dtype, 2);
      const Error e = load_error(dir.path(), c);
      EXPECT_EQ(e.code(), Errc::kModel) << e.what();
      const std::string value = std::isnan(bad) ? "NaN" : bad > 0 ? "+Inf" : "-Inf";
      EXPECT_NE(std::string(e.what()).find("tensor 'model.layers.1.mlp.up_proj.weight'"),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("holds " + value + " at element 5"), std::string::npos)
          << dtype << ": " << e.what();
    }
  }
}

// Sizes from config.json are bounded by the weight files before anything is allocated: a
// vocabulary of 2^31 - 1 over a 32-wide model would ask for 2^36 floats for the embedding.
TEST(HfCheckpointTest, AConfigLargerThanItsWeightsIsRefusedBeforeAllocating) {
  const ModelConfig c = llama_config();
  test::TempDir dir;
  test::write_model_folder(dir.path(), c, random_weights(c, 1), "F32");
  ModelConfig huge = c;
  huge.vocab_size = 2147483647u;
  huge.hidden_size = 65536;
  huge.num_layers = 1024;
  test::write_text(dir / "config.json", test::config_json(huge));
  const ModelConfig read = load_hf_checkpoint_config(dir.path());
  ASSERT_EQ(read.vocab_size, 2147483647u);
  const Error e = load_error(dir.path(), read);  // not std::bad_alloc
  EXPECT_EQ(e.code(), Errc::kModel) << e.what();
  EXPECT_NE(std::string(e.what()).find("model.embed_tokens.weight"), std::string::npos) << e.what();
}

TEST(HfCheckpointTest, AFifoOrAFolderInPlaceOfAFileIsRefusedWithoutBlocking) {
  const testing::HangGuard guard;
  const ModelConfig c = llama_config();
  for (const std::string name :
       {"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors"}) {
    test::TempDir dir;
    test::write_model_folder(dir.path(), c, random_weights(c, 1), "F32", 2);
    testing::plant_fifo((dir / name).string());
    try {
      if (name == "config.json")
        (void)load_hf_checkpoint_config(dir.path());
      else
        (void)load_hf_weights(dir.path(), c);
      ADD_FAILURE() << name << " as a FIFO was read";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kModel) << e.what();
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("a FIFO (named pipe), not a regular file"),
                std::string::npos)
          << e.what();
    }
  }
  test::TempDir dir;
  test::write_model_folder(dir.path(), c, random_weights(c, 1), "F32", 1);
  std::filesystem::remove(dir / "model.safetensors");
  std::filesystem::create_directory(dir / "model.safetensors");
  const Error e = load_error(dir.path(), c);
  EXPECT_NE(std::string(e.what()).find("a folder, not a regular file"), std::string::npos)
      << e.what();
}

}  // namespace
}  // namespace hsring
