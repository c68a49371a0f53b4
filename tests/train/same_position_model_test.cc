#include "train/same_position_model.h"
#include "tests/common/thrown_error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
#include "grad_check.h"
#include "test_batches.h"

namespace hsring::train {
namespace {

using hsring::testing::thrown_code;
using hsring::testing::thrown_message;

using testing::OwnedBatch;
using testing::random_batch;
using testing::small_config;

TEST(SamePositionLayoutTest, NamesShapesOffsets) {
  const SamePositionConfig c = small_config();
  const ParamLayout layout = same_position_param_layout(c);
  std::vector<std::string> names;
  for (const ParamInfo& t : layout.tensors) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "fc.weight", "hidden_norm.weight", "layers.0.input_layernorm.weight",
                       "layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.weight",
                       "layers.0.self_attn.v_proj.weight", "layers.0.self_attn.o_proj.weight",
                       "layers.0.post_attention_layernorm.weight", "layers.0.mlp.gate_proj.weight",
                       "layers.0.mlp.up_proj.weight", "layers.0.mlp.down_proj.weight",
                       "norm.weight", "lm_head.weight"}));
  EXPECT_EQ(layout.at("fc.weight").shape, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(layout.at("layers.0.self_attn.q_proj.weight").shape, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(layout.at("layers.0.self_attn.k_proj.weight").shape, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(layout.at("layers.0.mlp.down_proj.weight").shape, (std::vector<int64_t>{16, 24}));
  EXPECT_EQ(layout.at("lm_head.weight").shape, (std::vector<int64_t>{11, 16}));
  size_t end = 0;
  for (const ParamInfo& t : layout.tensors) {
    EXPECT_EQ(t.offset % kParamAlignment, 0u) << t.name;
    EXPECT_GE(t.offset, end) << t.name << " overlaps the tensor before it";
    end = t.offset + t.size;
    EXPECT_EQ(t.weight_decay, t.shape.size() == 2) << t.name;
  }
  EXPECT_EQ(layout.total % kParamAlignment, 0u);
  EXPECT_GE(layout.total, end);
  EXPECT_EQ(layout.find("embed_tokens.weight"), nullptr);
  EXPECT_EQ(thrown_code([&] { layout.at("nope"); }), Errc::kModel);

  const ParamLayout embed = same_position_param_layout(small_config(true));
  EXPECT_EQ(embed.tensors.front().name, "embed_tokens.weight");
  EXPECT_EQ(embed.tensors.front().shape, (std::vector<int64_t>{11, 16}));
}

// Both drafters' layers are read through one table of offsets (the CUDA trainers' shared
// layer reads it): a layout without QK-norm leaves q_norm and k_norm 0, and the GPU's one
// [Wq; Wk; Wv] product needs the three back to back.
TEST(SamePositionLayoutTest, LayerOffsetsAreTheLayoutsOwn) {
  const SamePositionConfig c = small_config();
  const ParamLayout layout = same_position_param_layout(c);
  const DrafterLayerOffsets o = drafter_layer_offsets(layout, 0);
  const auto at = [&](const char* name) { return layout.at(name).offset; };
  EXPECT_EQ(o.input_norm, at("layers.0.input_layernorm.weight"));
  EXPECT_EQ(o.q, at("layers.0.self_attn.q_proj.weight"));
  EXPECT_EQ(o.k, at("layers.0.self_attn.k_proj.weight"));
  EXPECT_EQ(o.v, at("layers.0.self_attn.v_proj.weight"));
  EXPECT_EQ(o.o, at("layers.0.self_attn.o_proj.weight"));
  EXPECT_EQ(o.post_norm, at("layers.0.post_attention_layernorm.weight"));
  EXPECT_EQ(o.gate, at("layers.0.mlp.gate_proj.weight"));
  EXPECT_EQ(o.up, at("layers.0.mlp.up_proj.weight"));
  EXPECT_EQ(o.down, at("layers.0.mlp.down_proj.weight"));
  EXPECT_EQ(o.q_norm, 0u);
  EXPECT_EQ(o.k_norm, 0u);
  // q 16 x 16 and k 8 x 16 values: multiples of the alignment, so no gap.
  EXPECT_TRUE(projections_adjacent(o, c.q_dim(), c.kv_dim(), c.width));
  SamePositionConfig gapped = c;
  gapped.width = 12;  // q 16 x 12 = 192 values: 3 x 64, k 8 x 12 = 96: a gap after k
  EXPECT_FALSE(projections_adjacent(drafter_layer_offsets(same_position_param_layout(gapped), 0),
                                    gapped.q_dim(), gapped.kv_dim(), gapped.width));
  EXPECT_EQ(thrown_code([&] { drafter_layer_offsets(layout, 1); }), Errc::kModel)
      << "the same-position drafter has one layer";
}

TEST(SamePositionModelTest, InitIsDeterministicAndScaled) {
  const SamePositionConfig c = small_config(true);
  SamePositionModel a(c, {7}), b(c, {7}), other(c, {8});
  EXPECT_TRUE(std::ranges::equal(a.params(), b.params()));
  EXPECT_FALSE(std::ranges::equal(a.params(), other.params()));
  for (const ParamInfo& t : a.layout().tensors) {
    const std::span<float> p = a.param(t.name);
    if (t.shape.size() == 1) {
      EXPECT_TRUE(std::ranges::all_of(p, [](float x) { return x == 1.0f; })) << t.name;
    } else if (t.name != "embed_tokens.weight") {
      const float bound = 1.0f / std::sqrt(float(t.shape[1]));
      EXPECT_TRUE(std::ranges::all_of(p, [&](float x) { return std::abs(x) <= bound; })) << t.name;
    }
  }
  // The gaps between tensors are zero, in the parameters and in the gradients.
  std::vector<bool> used(a.layout().total, false);
  for (const ParamInfo& t : a.layout().tensors)
    std::fill(used.begin() + std::ptrdiff_t(t.offset),
              used.begin() + std::ptrdiff_t(t.offset + t.size), true);
  for (size_t i = 0; i < used.size(); ++i)
    if (!used[i]) {
      ASSERT_EQ(a.params()[i], 0.0f) << i;
    }
  EXPECT_TRUE(std::ranges::all_of(a.grads(), [](float g) { return g == 0.0f; }));
}

TEST(SamePositionModelTest, LmHeadInitFromTarget) {
  const SamePositionConfig c = small_config();
  const std::vector<float> head = testing::random_floats(size_t(c.vocab_size) * c.width, 3);
  SamePositionModel model(c, SamePositionInit{1, head});
  EXPECT_TRUE(std::ranges::equal(model.param("lm_head.weight"), head));
  const std::vector<float> wrong(head.size() - 1);
  EXPECT_EQ(thrown_code([&] { SamePositionModel(c, SamePositionInit{1, wrong}); }), Errc::kModel);
}

TEST(SamePositionModelTest, RejectsBadBatches) {
  const SamePositionConfig c = small_config(true);
  SamePositionModel model(c);
  const OwnedBatch good = random_batch(c, {0, 4, 10}, 1);
  EXPECT_NO_THROW(model.forward(good.view()));
  const auto rejects = [&](auto&& edit) {
    OwnedBatch b = good;
    edit(b);
    try {
      model.forward(b.view());
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kModel) << e.what();
      return true;
    }
    return false;
  };
  EXPECT_TRUE(rejects([](OwnedBatch& b) { b.features.pop_back(); }));
  EXPECT_TRUE(rejects([](OwnedBatch& b) { b.labels.pop_back(); }));
  EXPECT_TRUE(rejects([](OwnedBatch& b) { b.positions.pop_back(); }));
  EXPECT_TRUE(rejects([](OwnedBatch& b) { b.positions[3] = -1; }));
  EXPECT_TRUE(rejects([](OwnedBatch& b) { b.labels[2] = 11; }));
  EXPECT_TRUE(rejects([](OwnedBatch& b) { b.tokens[2] = 11; }));
  EXPECT_TRUE(rejects([](OwnedBatch& b) { b.doc_offsets = {0, 4, 4, 10}; }));
  EXPECT_TRUE(rejects([](OwnedBatch& b) { b.doc_offsets = {0, 9}; }));
  EXPECT_TRUE(rejects([](OwnedBatch& b) { b.doc_offsets = {1, 10}; }));
  EXPECT_TRUE(rejects([](OwnedBatch& b) {
    b = OwnedBatch();
    b.doc_offsets = {0};
  }));
  // Any negative label is ignored, not an error.
  EXPECT_FALSE(rejects([](OwnedBatch& b) { b.labels[2] = -7; }));
  // The words of the checks both drafters share (train/drafter_batch.h), under this one's name.
  const auto message = [&](auto&& edit) {
    OwnedBatch b = good;
    edit(b);
    return thrown_message([&] { model.forward(b.view()); });
  };
  EXPECT_EQ(message([](OwnedBatch& b) { b.features.pop_back(); }),
            "drafter batch: features hold 159 values, 10 tokens of K*H 16 need 160");
  EXPECT_EQ(message([](OwnedBatch& b) { b.labels.pop_back(); }),
            "drafter batch: 9 labels for 10 tokens");
  EXPECT_EQ(message([](OwnedBatch& b) { b.positions[3] = -1; }),
            "drafter batch: position -1 of token 3 is negative");
  EXPECT_EQ(message([](OwnedBatch& b) { b.labels[2] = 11; }),
            "drafter batch: label 11 of token 2 is outside the vocabulary of 11 (negative labels "
            "are ignored)");
  EXPECT_EQ(message([](OwnedBatch& b) { b.tokens[2] = 11; }),
            "drafter batch: token 11 at 2 is outside the vocabulary of 11");
  // A batch with nothing to count: loss 0, agreement 0, no gradient.
  OwnedBatch none = good;
  std::fill(none.labels.begin(), none.labels.end(), kIgnoreLabel);
  const LossStats s = model.forward_backward(none.view());
  EXPECT_EQ(s.counted, 0u);
  EXPECT_EQ(s.loss, 0.0);
  EXPECT_TRUE(std::ranges::all_of(model.grads(), [](float g) { return g == 0.0f; }));
}

// The whole model in double: the backward of every parameter tensor against central
// differences of the mean loss, with random (not unit) norm weights and both options.
class WholeModelGradientTest : public ::testing::TestWithParam<bool> {};

TEST_P(WholeModelGradientTest, EveryTensor) {
  const SamePositionConfig c = small_config(GetParam());
  BasicSamePositionModel<double> model(c, {11});
  const std::vector<double> jitter = testing::random_values(model.params().size(), 12, -0.3, 0.3);
  for (const ParamInfo& t : model.layout().tensors)
    for (size_t i = t.offset; i < t.offset + t.size; ++i) model.params()[i] += jitter[i];
  const OwnedBatch batch = random_batch(c, {0, 4, 10}, 13, 4);
  const LossStats stats = model.forward_backward(batch.view());
  EXPECT_GT(stats.counted, 0u);
  EXPECT_LT(stats.counted, stats.tokens);
  const std::vector<double> grads(model.grads().begin(), model.grads().end());
  const auto loss = [&] { return model.forward(batch.view()).loss; };
  for (const ParamInfo& t : model.layout().tensors) {
    std::vector<size_t> indices = testing::sample_indices(t.size, 40, t.offset);
    for (size_t& i : indices) i += t.offset;
    const testing::GradCheck g = testing::check_gradient(model.params(), grads, loss, indices);
    EXPECT_LT(g.max_error, 1e-6) << g.describe(t.name);
  }
}

INSTANTIATE_TEST_SUITE_P(Options, WholeModelGradientTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "WithTokenEmbedding" : "FeaturesOnly";
                         });

TEST(SamePositionModelTest, FloatModelMatchesDouble) {
  const SamePositionConfig c = small_config(true);
  SamePositionModel f(c, {21});
  BasicSamePositionModel<double> d(c, {21});
  EXPECT_TRUE(
      std::ranges::equal(f.params(), d.params(), [](float a, double b) { return double(a) == b; }));
  const OwnedBatch batch = random_batch(c, {0, 7, 9, 16}, 22);
  const LossStats sf = f.forward_backward(batch.view());
  const LossStats sd = d.forward_backward(batch.view());
  EXPECT_NEAR(sf.loss, sd.loss, 1e-6 * sd.loss);
  EXPECT_EQ(sf.agreed, sd.agreed);
  for (const ParamInfo& t : f.layout().tensors) {
    const std::span<float> gf = f.grad(t.name);
    const std::span<double> gd = d.grad(t.name);
    double scale = 0, worst = 0;
    for (size_t i = 0; i < t.size; ++i) {
      scale = std::max(scale, std::abs(gd[i]));
      worst = std::max(worst, std::abs(double(gf[i]) - gd[i]));
    }
    EXPECT_LT(worst, 1e-5 * scale + 1e-12) << t.name;
  }
}

TEST(SamePositionModelTest, LossSeesOnlyTheDocumentAndWindow) {
  // Only row 8 is counted; window 3 in document [5, 12): rows 6, 7, 8 may move the loss,
  // no other row's features may change a bit of it.
  const SamePositionConfig c = small_config();
  SamePositionModel model(c, {31});
  OwnedBatch batch = random_batch(c, {0, 5, 12}, 32, 0);
  std::fill(batch.labels.begin(), batch.labels.end(), kIgnoreLabel);
  batch.labels[8] = 4;
  const double base = model.forward(batch.view()).loss;
  const size_t fd = c.feature_dim();
  for (size_t j = 0; j < 12; ++j) {
    OwnedBatch changed = batch;
    for (size_t i = 0; i < fd; ++i) changed.features[j * fd + i] += 0.5f;
    const double loss = model.forward(changed.view()).loss;
    const bool visible = j >= 6 && j <= 8;
    EXPECT_EQ(loss != base, visible) << "row " << j;
  }
}

TEST(SamePositionModelTest, ThreadCountDoesNotChangeBits) {
  SamePositionConfig c;
  c.num_captured = 3;
  c.target_hidden = 32;
  c.width = 64;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 128;
  c.vocab_size = 64;
  c.window = 16;
  c.embed_tokens = true;
  const OwnedBatch batch = random_batch(c, {0, 50, 51, 160}, 41);
  const auto run = [&](uint32_t threads) {
    SamePositionModel model(c, {40}, threads);
    const LossStats s = model.forward_backward(batch.view());
    std::vector<float> out(model.grads().begin(), model.grads().end());
    out.push_back(float(s.loss));
    out.push_back(float(s.loss - double(float(s.loss))));  // the rest of the double
    return out;
  };
  const std::vector<float> one = run(1);
  EXPECT_EQ(run(2), one);
  EXPECT_EQ(run(4), one);
}

TEST(SamePositionModelTest, GradientsAccumulateAcrossBatches) {
  const SamePositionConfig c = small_config();
  SamePositionModel model(c, {51});
  const OwnedBatch batch = random_batch(c, {0, 10}, 52);
  model.forward_backward(batch.view());
  const std::vector<float> once(model.grads().begin(), model.grads().end());
  model.forward_backward(batch.view());
  // Twice the gradient, up to the rounding of each addition into the float buffer.
  for (size_t i = 0; i < once.size(); ++i)
    ASSERT_NEAR(model.grads()[i], 2 * once[i], 1e-6 * std::abs(once[i])) << i;
  model.zero_grads();
  EXPECT_TRUE(std::ranges::all_of(model.grads(), [](float g) { return g == 0.0f; }));
}

}  // namespace
}  // namespace hsring::train
