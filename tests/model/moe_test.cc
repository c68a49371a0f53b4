// Mixture-of-experts targets (Qwen3-MoE, Qwen3.5-MoE): the router, the CPU mixture against
// a per-token one, config parsing, checkpoints in both expert layouts, and the outline of
// an architecture hsring's forward does not build.
#include <gtest/gtest.h>

#include <numeric>
#include <string>

#include "common/error.h"
#include "model/cpu_moe.h"
#include "model/cpu_target_model.h"
#include "model/hf_checkpoint.h"
#include "model/moe_router.h"
#include "model/target_head.h"
#include "ops/dot.h"
#include "ops/linear.h"
#include "test_files.h"

namespace hsring {
namespace {

std::vector<ExpertChoice> route(std::vector<float> logits, uint32_t top_k, bool normalise) {
  std::vector<ExpertChoice> out(top_k);
  route_token(logits.data(), uint32_t(logits.size()), top_k, normalise, out.data());
  return out;
}

TEST(MoeRouterTest, SoftmaxTopKAndRenormalisation) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.0f};
  double sum = 0;
  for (float l : logits) sum += std::exp(double(l));
  const auto kept = route(logits, 2, false);
  ASSERT_EQ(kept[0].expert, 1u);
  ASSERT_EQ(kept[1].expert, 3u);
  EXPECT_FLOAT_EQ(kept[0].weight, float(std::exp(2.0) / sum));
  EXPECT_FLOAT_EQ(kept[1].weight, float(std::exp(1.0) / sum));
  const auto normalised = route(logits, 2, true);
  EXPECT_FLOAT_EQ(normalised[0].weight, float(std::exp(2.0) / (std::exp(2.0) + std::exp(1.0))));
  EXPECT_NEAR(normalised[0].weight + normalised[1].weight, 1.0f, 1e-7);
  // Every expert, in order, on ties the lower id first.
  const auto ties = route({1.0f, 3.0f, 1.0f, 3.0f, 1.0f}, 5, false);
  const uint32_t order[] = {1, 3, 0, 2, 4};
  for (size_t k = 0; k < 5; ++k) EXPECT_EQ(ties[k].expert, order[k]) << k;
}

// A small Qwen3-MoE: 4 layers, the second dense (mlp_only_layers), 6 experts of 24, 2 per
// token; with Qwen3.5's shared expert when `shared`.
ModelConfig small_moe(bool hybrid) {
  ModelConfig c = named_model_config(hybrid ? "qwen3.6-35b-a3b" : "qwen3-30b-a3b");
  c.name = hybrid ? "small-qwen3_5_moe" : "small-qwen3_moe";
  c.hidden_size = 64;
  c.num_layers = 4;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.vocab_size = 97;
  c.mlp_kinds.assign(4, MlpKind::kExperts);
  c.moe = {6, 2, 24, hybrid ? 40u : 0u, hybrid};
  if (hybrid) {
    c.layer_kinds.resize(4);
    c.rotary_dim = 8;
    c.delta_net = {2, 4, 16, 8, 4};
  } else {
    c.intermediate_size = 48;
    c.mlp_kinds[1] = MlpKind::kDense;
  }
  return c;
}

// The mixture against the same maths token by token: each token alone through its experts
// (one-row products), summed in rank order. Same bits: grouping rows by expert changes
// nothing a row computes.
TEST(CpuMoeTest, GroupedExpertsEqualTheMixtureTokenByToken) {
  for (bool hybrid : {false, true}) {
    const ModelConfig c = small_moe(hybrid);
    ASSERT_EQ(validate_config(c), "");
    const ModelWeights w = random_weights(c, 7);
    const MoeWeights& moe = w.layers[0].moe;
    const size_t rows = 9, h = c.hidden_size;
    std::vector<float> x(rows * h);
    for (size_t i = 0; i < x.size(); ++i) x[i] = random_uniform(42, i);
    std::vector<float> grouped(rows * h);
    MlpScratch scratch;
    moe_mlp(x.data(), rows, h, c.moe, moe, scratch, grouped.data(), 2);
    std::vector<bool> used(c.moe.num_experts, false);
    for (size_t r = 0; r < rows; ++r) {
      const float* row = x.data() + r * h;
      std::vector<float> logits(c.moe.num_experts);
      ops::linear_forward(row, 1, h, moe.router.data(), logits.size(), logits.data(),
                          ops::Sums::kFloat, 1);
      std::vector<ExpertChoice> picks(c.moe.experts_per_token);
      route_token(logits.data(), c.moe.num_experts, c.moe.experts_per_token, c.moe.normalise_top_k,
                  picks.data());
      std::vector<float> want(h, 0.0f), y(h);
      for (const ExpertChoice& p : picks) {
        const SwigluWeights& e = moe.experts[p.expert];
        swiglu_mlp(row, 1, h, e.gate_proj.data(), e.up_proj.data(), e.down_proj.data(),
                   c.moe.expert_intermediate, scratch, y.data(), 1);
        for (size_t i = 0; i < h; ++i) want[i] += p.weight * y[i];
        used[p.expert] = true;
      }
      if (hybrid) {
        swiglu_mlp(row, 1, h, moe.shared.gate_proj.data(), moe.shared.up_proj.data(),
                   moe.shared.down_proj.data(), c.moe.shared_intermediate, scratch, y.data(), 1);
        const float gate = 1.0f / (1.0f + std::exp(-ops::dot(row, moe.shared_gate.data(), h)));
        for (size_t i = 0; i < h; ++i) want[i] += gate * y[i];
      }
      EXPECT_EQ(std::vector<float>(grouped.begin() + std::ptrdiff_t(r * h),
                                   grouped.begin() + std::ptrdiff_t((r + 1) * h)),
                want)
          << "row " << r << (hybrid ? " (shared expert)" : "");
    }
    EXPECT_GE(std::count(used.begin(), used.end(), true), 3) << "the rows share one expert";
  }
}

TEST(CpuMoeTest, DocumentsAreIndependentOfTheirNeighbours) {
  for (bool hybrid : {false, true}) {
    const ModelConfig c = small_moe(hybrid);
    CpuTargetModel model(c, random_weights(c, 3), {2});
    const std::vector<int32_t> doc = {5, 9, 11, 2, 40, 41, 7};
    std::vector<int32_t> tokens = {1, 2, 3, 4};
    tokens.insert(tokens.end(), doc.begin(), doc.end());
    const std::vector<int32_t> positions = {0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6};
    const std::vector<int32_t> alone_positions(positions.begin() + 4, positions.end());
    ForwardRequest r;
    r.capture_layers = {0, 1, 2, 3};
    ForwardOutput packed, alone;
    model.forward({tokens, positions, std::vector<int32_t>{0, 4, 11}}, r, packed);
    model.forward({doc, alone_positions, std::vector<int32_t>{0, 7}}, r, alone);
    for (size_t k = 0; k < 4; ++k)
      EXPECT_EQ(std::vector<float>(packed.captured[k].begin() + 4 * 64, packed.captured[k].end()),
                alone.captured[k])
          << "layer " << k;
    EXPECT_EQ(std::vector<int32_t>(packed.greedy.begin() + 4, packed.greedy.end()), alone.greedy);
  }
}

// Qwen/Qwen3-30B-A3B's published config.json (trimmed of fields hsring does not read),
// with mlp_only_layers and decoder_sparse_step set to show their rule.
constexpr char kQwen3Moe[] = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
  "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
  "num_hidden_layers": 6, "num_attention_heads": 32, "num_key_value_heads": 4,
  "head_dim": 128, "vocab_size": 151936, "num_experts": 128, "num_experts_per_tok": 8,
  "norm_topk_prob": true, "decoder_sparse_step": 2, "mlp_only_layers": [3],
  "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "tie_word_embeddings": false,
  "use_sliding_window": false, "sliding_window": null, "hidden_act": "silu",
  "router_aux_loss_coef": 0.001, "output_router_logits": false
})";

TEST(MoeConfigTest, ReadsQwen3MoeAndQwen35MoeFields) {
  const ModelConfig c = parse_hf_config(kQwen3Moe, "moe/config.json");
  EXPECT_EQ(c.model_type, "qwen3_moe");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.moe.num_experts, 128u);
  EXPECT_EQ(c.moe.experts_per_token, 8u);
  EXPECT_EQ(c.moe.expert_intermediate, 768u);
  EXPECT_TRUE(c.moe.normalise_top_k);
  // (layer + 1) % 2 == 0, and not layer 3.
  const std::vector<MlpKind> want = {MlpKind::kDense, MlpKind::kExperts, MlpKind::kDense,
                                     MlpKind::kDense, MlpKind::kDense,   MlpKind::kExperts};
  EXPECT_EQ(c.mlp_kinds, want);
  // transformers 5 saves num_experts under its alias num_local_experts.
  std::string aliased = kQwen3Moe;
  aliased.replace(aliased.find("\"num_experts\""), 13, "\"num_local_experts\"");
  EXPECT_EQ(parse_hf_config(aliased, "x").moe.num_experts, 128u);

  const std::string qwen35 = R"({"model_type": "qwen3_5_moe", "tie_word_embeddings": false,
    "text_config": {"model_type": "qwen3_5_moe_text", "hidden_size": 2048,
      "num_hidden_layers": 40, "num_attention_heads": 16, "num_key_value_heads": 2,
      "head_dim": 256, "vocab_size": 248320, "num_experts": 256, "num_experts_per_tok": 8,
      "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
      "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                          "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10],
                          "mrope_interleaved": true}}})";
  const ModelConfig h = parse_hf_config(qwen35, "moe35/config.json");
  EXPECT_EQ(h.model_type, "qwen3_5_moe");
  EXPECT_TRUE(h.hybrid());
  EXPECT_EQ(h.weight_prefix, "model.language_model.");
  EXPECT_EQ(h.intermediate_size, 0u);
  EXPECT_EQ(h.mlp_kinds, std::vector<MlpKind>(40, MlpKind::kExperts));
  EXPECT_EQ(h.moe.shared_intermediate, 512u);
  EXPECT_TRUE(h.moe.normalise_top_k);
  // The preset is this shape: about 35e9 weights, 3e9 of them active per token.
  ModelConfig preset = named_model_config("qwen3.6-35b-a3b");
  EXPECT_EQ(preset.layer_kinds, h.layer_kinds);
  EXPECT_NEAR(double(parameter_count(preset)), 34.7e9, 0.5e9);
  EXPECT_NEAR(double(parameter_count(named_model_config("qwen3-30b-a3b"))), 30.5e9, 0.3e9);
  EXPECT_EQ(drafter_mlp_width(preset), 6144u);
}

Error parse_error(const std::string& text) {
  try {
    parse_hf_config(text, "cfg/config.json");
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "parsed: " << text;
  return Error(Errc::kModel, "");
}

TEST(MoeConfigTest, RefusalsNameWhatIsMissing) {
  std::string top_k = kQwen3Moe;
  top_k.replace(top_k.find("\"num_experts_per_tok\": 8"), 24, "\"num_experts_per_tok\": 200");
  EXPECT_NE(std::string(parse_error(top_k).what()).find("exceeds the number of experts"),
            std::string::npos);
  std::string sigmoid = kQwen3Moe;
  sigmoid.insert(1, "\"scoring_func\": \"sigmoid\",");
  EXPECT_NE(std::string(parse_error(sigmoid).what()).find("'scoring_func'"), std::string::npos);
  std::string gpt_oss = kQwen3Moe;
  gpt_oss.replace(gpt_oss.find("\"qwen3_moe\""), 11, "\"gpt_oss\"");
  const std::string oss = parse_error(gpt_oss).what();
  EXPECT_NE(oss.find("gpt-oss"), std::string::npos) << oss;
  EXPECT_NE(oss.find("--target-cmd"), std::string::npos) << oss;
  std::string mla = kQwen3Moe;
  mla.replace(mla.find("\"qwen3_moe\""), 11, "\"deepseek_v3\"");
  EXPECT_NE(std::string(parse_error(mla).what()).find("multi-head latent attention (MLA)"),
            std::string::npos);
  // The CUDA forward runs the released mixtures; one whose rows its grouped GEMM cannot copy
  // in 16-byte pieces is refused, naming the sizes and the ways around it.
  EXPECT_EQ(cuda_forward_refusal(named_model_config("qwen3-30b-a3b")), "");
  EXPECT_EQ(cuda_forward_refusal(named_model_config("qwen3.6-35b-a3b")), "");
  EXPECT_EQ(cuda_forward_refusal(named_model_config("qwen3-8b")), "");
  ModelConfig odd = named_model_config("qwen3-30b-a3b");
  odd.moe.expert_intermediate = 100;
  const std::string gpu = cuda_forward_refusal(odd);
  EXPECT_NE(gpu.find("multiples of 8, not 2048 and 100"), std::string::npos) << gpu;
  EXPECT_NE(gpu.find("on the CPU or through --target-cmd"), std::string::npos) << gpu;
}

void write_weights(const std::filesystem::path& folder, const ModelConfig& c, const ModelWeights& w,
                   bool fused) {
  std::vector<test::TestTensor> tensors;
  std::vector<float> gate_up, down;
  for_each_weight(
      c, w,
      [&](const std::string& name, const std::vector<int64_t>& shape,
          const std::vector<float>& values) {
        const size_t at = name.find("mlp.experts.");
        if (!fused || at == std::string::npos) {
          tensors.push_back(test::make_tensor(name, "F32", shape, values));
          return;
        }
        // Fused: [E, 2I, H] gate rows then up rows per expert, [E, H, I].
        std::vector<float>& into = name.find("down_proj") != std::string::npos ? down : gate_up;
        into.insert(into.end(), values.begin(), values.end());
        const std::string last =
            "experts." + std::to_string(c.moe.num_experts - 1) + ".down_proj.weight";
        if (name.size() > last.size() &&
            name.compare(name.size() - last.size(), last.size(), last) == 0) {
          const std::string mlp = name.substr(0, at + 4);
          const int64_t e = c.moe.num_experts, i = c.moe.expert_intermediate, h = c.hidden_size;
          tensors.push_back(
              test::make_tensor(mlp + "experts.gate_up_proj", "BF16", {e, 2 * i, h}, gate_up));
          tensors.push_back(test::make_tensor(mlp + "experts.down_proj", "BF16", {e, h, i}, down));
          gate_up.clear();
          down.clear();
        }
      });
  test::write_safetensors(folder / "model.safetensors", tensors);
}

// Per-expert names (save_pretrained's) and the fused 3D layout load the same experts.
TEST(MoeCheckpointTest, BothExpertLayoutsLoad) {
  const ModelConfig c = small_moe(false);
  const ModelWeights w = random_weights(c, 9);
  for (bool fused : {false, true}) {
    test::TempDir dir;
    test::write_text(dir / "config.json", "{}");
    write_weights(dir.path(), c, w, fused);
    const ModelWeights loaded = load_hf_weights(dir.path(), c);
    const auto& a = w.layers[2].moe.experts[5];
    const auto& b = loaded.layers[2].moe.experts[5];
    if (!fused) {
      EXPECT_EQ(a.up_proj, b.up_proj);
      EXPECT_EQ(a.down_proj, b.down_proj);
      continue;
    }
    ASSERT_EQ(a.up_proj.size(), b.up_proj.size());
    for (size_t i = 0; i < a.up_proj.size(); ++i) EXPECT_NEAR(a.up_proj[i], b.up_proj[i], 1e-2);
    for (size_t i = 0; i < a.down_proj.size(); ++i)
      EXPECT_NEAR(a.down_proj[i], b.down_proj[i], 1e-2);
    EXPECT_EQ(w.layers[1].gate_proj, loaded.layers[1].gate_proj);  // the dense layer
  }
}

// An architecture hsring's forward does not build (gpt-oss): its outline is what a
// drafter needs, and the head reads only the embedding and the LM head.
TEST(ModelOutlineTest, AnyArchitectureGivesWhatADrafterNeeds) {
  test::TempDir dir;
  test::write_text(dir / "config.json", R"({"model_type": "gpt_oss", "hidden_size": 64,
    "num_hidden_layers": 5, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "vocab_size": 90, "intermediate_size": 96, "num_local_experts": 4, "experts_per_token": 2,
    "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"],
    "rope_theta": 150000, "rope_scaling": {"rope_type": "yarn", "factor": 32.0},
    "tie_word_embeddings": false, "rms_norm_eps": 1e-05})");
  const std::vector<float> embed(90 * 64, 0.25f), head(90 * 64, -0.5f);
  test::write_safetensors(dir / "model.safetensors",
                          {test::make_tensor("model.embed_tokens.weight", "BF16", {90, 64}, embed),
                           test::make_tensor("lm_head.weight", "F32", {90, 64}, head),
                           test::make_tensor("model.layers.0.mlp.experts.gate_up_proj", "BF16",
                                             {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8})});
  const std::string folder = dir.path().string();
  try {
    model_config_of(folder);
    ADD_FAILURE() << "gpt-oss parsed as a native model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gpt-oss"), std::string::npos) << e.what();
  }
  const ModelConfig c = model_outline_of(folder);
  EXPECT_EQ(c.hidden_size, 64u);
  EXPECT_EQ(c.vocab_size, 90u);
  EXPECT_EQ(c.num_layers, 5u);
  EXPECT_EQ(c.head_dim, 16u);
  EXPECT_DOUBLE_EQ(c.rope_theta, 150000.0);
  EXPECT_NE(c.no_native_forward.find("gpt-oss"), std::string::npos);
  EXPECT_EQ(validate_config(c), "");
  const TargetHead h = load_target_head(folder, 0);
  EXPECT_EQ(h.embed, embed);
  EXPECT_EQ(h.lm_head, head);
  // hsring's own forward refuses the outline with the reason it was not parsed natively.
  try {
    CpuTargetModel model(c, ModelWeights{}, {1});
    ADD_FAILURE() << "a CPU model of an outline";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gpt-oss"), std::string::npos) << e.what();
  }
  // A multimodal wrapper's text model (text_config), whatever its type; a field the
  // drafter needs is named when missing.
  test::write_text(dir / "config.json", R"({"model_type": "some_vlm", "tie_word_embeddings": true,
    "text_config": {"hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
                    "vocab_size": 90, "rope_parameters": {"rope_theta": 5e6}}})");
  const ModelConfig wrapped = model_outline_of(folder);
  EXPECT_EQ(wrapped.num_layers, 3u);
  EXPECT_EQ(wrapped.head_dim, 16u);
  EXPECT_DOUBLE_EQ(wrapped.rope_theta, 5e6);
  EXPECT_EQ(load_target_head(folder, 0).embed, embed);  // found under model.
  test::write_text(dir / "config.json", R"({"model_type": "mystery", "num_hidden_layers": 3,
    "num_attention_heads": 4, "vocab_size": 90})");
  try {
    model_outline_of(folder);
    ADD_FAILURE() << "an outline without a hidden size";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'hidden_size' is missing"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hsring
