// The DFlash drafter model: the backward of every parameter against finite differences in
// double, the block mask at model level, the loss weighting and the acceptance statistic
// against direct computations, determinism across thread counts, and a short training run.
#include "train/dflash_model.h"
#include "tests/common/thrown_error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/error.h"
#include "dflash_batches.h"
#include "grad_check.h"
#include "train/dflash_blocks.h"
#include "train/optimizer.h"

namespace hsring::train {
namespace {

using hsring::testing::thrown_code;
using hsring::testing::thrown_message;

using testing::OwnedDflashBatch;
using testing::OwnedTargetWeights;
using testing::random_dflash_batch;
using testing::random_target;
using testing::small_dflash_config;

// Norm weights away from 1 and Linear weights jittered, so no gradient term hides behind a
// unit weight.
template <class Real>
void jitter(BasicDflashModel<Real>& model, uint64_t seed) {
  const std::vector<double> noise = testing::random_values(model.params().size(), seed, -0.3, 0.3);
  for (const ParamInfo& t : model.layout().tensors)
    for (size_t i = t.offset; i < t.offset + t.size; ++i)
      model.params()[i] = Real(double(model.params()[i]) + noise[i]);
}

TEST(DflashModelGradientTest, EveryTensorWithSeveralLayersDocumentsAndBlocks) {
  const DflashConfig c = small_dflash_config(2);
  const OwnedTargetWeights target = random_target(c, 1);
  BasicDflashModel<double> model(c, target.view(), 2);
  jitter(model, 3);
  // Three documents, one too short for a block; blocks overlap in their context and labels.
  const OwnedDflashBatch batch = random_dflash_batch(c, {0, 9, 12, 26}, 6, 4, 3);
  ASSERT_GE(batch.anchors.size(), 5u);
  const DflashStats stats = model.forward_backward(batch.view());
  EXPECT_GT(stats.counted, 0u);
  EXPECT_LT(stats.counted, stats.blocks * (c.block_size - 1));  // some labels are ignored
  const std::vector<double> grads(model.grads().begin(), model.grads().end());
  const auto loss = [&] { return model.forward(batch.view()).loss; };
  for (const ParamInfo& t : model.layout().tensors) {
    std::vector<size_t> indices = testing::sample_indices(t.size, 24, t.offset);
    for (size_t& i : indices) i += t.offset;
    const testing::GradCheck g = testing::check_gradient(model.params(), grads, loss, indices);
    EXPECT_LT(g.max_error, 1e-6) << g.describe(t.name);
    double largest = 0;
    for (size_t i = t.offset; i < t.offset + t.size; ++i)
      largest = std::max(largest, std::abs(grads[i]));
    EXPECT_GT(largest, 1e-6) << t.name << " gets no gradient";
  }
}

TEST(DflashModelTest, FloatModelMatchesDouble) {
  const DflashConfig c = small_dflash_config(2);
  const OwnedTargetWeights target = random_target(c, 11);
  DflashModel f(c, target.view(), 12);
  BasicDflashModel<double> d(c, target.view(), 12);
  EXPECT_TRUE(
      std::ranges::equal(f.params(), d.params(), [](float a, double b) { return double(a) == b; }));
  const OwnedDflashBatch batch = random_dflash_batch(c, {0, 20, 41}, 8, 13);
  const DflashStats sf = f.forward_backward(batch.view());
  const DflashStats sd = d.forward_backward(batch.view());
  EXPECT_NEAR(sf.loss, sd.loss, 1e-6 * sd.loss);
  EXPECT_EQ(sf.counted, sd.counted);
  for (const ParamInfo& t : f.layout().tensors) {
    const std::span<float> gf = f.grad(t.name);
    const std::span<double> gd = d.grad(t.name);
    double scale = 0, worst = 0;
    for (size_t i = 0; i < t.size; ++i) {
      scale = std::max(scale, std::abs(gd[i]));
      worst = std::max(worst, std::abs(double(gf[i]) - gd[i]));
    }
    EXPECT_LT(worst, 1e-4 * scale + 1e-12) << t.name;
  }
}

// A block cut short for drafting (set_block_size) is the block of a drafter built with that
// size and the same parameters: the same hidden states and drafts, row for row.
TEST(DflashModelTest, ACutBlockDraftsAsADrafterBuiltWithItsSize) {
  DflashConfig c = small_dflash_config(2);
  c.block_size = 6;
  const OwnedTargetWeights target = random_target(c, 31);
  DflashModel full(c, target.view(), 32);
  DflashConfig cut = c;
  cut.block_size = 3;
  DflashModel built(cut, target.view(), 32);
  ASSERT_TRUE(std::ranges::equal(full.params(), built.params()));
  full.set_block_size(3);
  EXPECT_EQ(full.config().block_size, 3u);
  const OwnedDflashBatch batch = random_dflash_batch(cut, {0, 20, 41}, 5, 33);
  full.forward(batch.view());
  built.forward(batch.view());
  EXPECT_TRUE(std::ranges::equal(full.predictions(), built.predictions()));
  EXPECT_TRUE(std::ranges::equal(full.block_hidden(), built.block_hidden()));
  ASSERT_EQ(full.predictions().size(), 5u * 3u);
  // A size the config refuses changes nothing.
  EXPECT_THROW(full.set_block_size(1), Error);
  EXPECT_EQ(full.config().block_size, 3u);
  full.set_block_size(6);
  EXPECT_EQ(full.config().block_size, 6u);
}

// Block b (anchor a in document [s, e)) reads context rows [s, a), its anchor's token and
// its positions; nothing else may change one bit of its output.
TEST(DflashModelTest, BlockSeesOnlyItsContextAndItsOwnInputs) {
  const DflashConfig c = small_dflash_config(2);
  const OwnedTargetWeights target = random_target(c, 21);
  DflashModel model(c, target.view(), 22);
  jitter(model, 23);
  OwnedDflashBatch batch = random_dflash_batch(c, {0, 14, 30}, 0, 24, 0);
  batch.anchors = {3, 9, 16, 22};  // two blocks per document
  const size_t nb = batch.anchors.size(), bs = c.block_size, d = c.width();
  const std::vector<std::pair<int32_t, int32_t>> docs = {{0, 14}, {0, 14}, {14, 30}, {14, 30}};
  model.forward(batch.view());
  const std::vector<float> reference(model.block_hidden().begin(), model.block_hidden().end());
  const auto moved = [&](const OwnedDflashBatch& changed) {
    model.forward(changed.view());
    std::vector<bool> blocks(nb, false);
    for (size_t i = 0; i < reference.size(); ++i)
      if (model.block_hidden()[i] != reference[i]) blocks[i / (bs * d)] = true;
    return blocks;
  };
  const size_t fd = c.feature_dim();
  for (size_t t = 0; t < 30; ++t) {
    OwnedDflashBatch changed = batch;
    for (size_t i = 0; i < fd; ++i) changed.features[t * fd + i] += 0.5f;
    const std::vector<bool> m = moved(changed);
    for (size_t b = 0; b < nb; ++b) {
      const bool visible = int32_t(t) >= docs[b].first && int32_t(t) < batch.anchors[b];
      EXPECT_EQ(m[b], visible) << "features of row " << t << ", block " << b;
    }
  }
  for (size_t other = 0; other < nb; ++other) {
    OwnedDflashBatch changed = batch;
    const auto a = size_t(batch.anchors[other]);
    changed.tokens[a] = (changed.tokens[a] + 1) % int32_t(c.mask_token_id);
    std::vector<bool> m = moved(changed);
    for (size_t b = 0; b < nb; ++b)
      EXPECT_EQ(m[b], b == other) << "anchor token of block " << other << ", block " << b;
    changed = batch;
    changed.positions[a] += 3;  // moves the anchor's RoPE, and the context row it is for others
    m = moved(changed);
    EXPECT_TRUE(m[other]);
    for (size_t b = 0; b < nb; ++b) {
      const bool visible =
          b == other || (int32_t(a) >= docs[b].first && int32_t(a) < batch.anchors[b]);
      EXPECT_EQ(m[b], visible) << "position of row " << a << ", block " << b;
    }
  }
  // Tokens and labels of non-anchor rows are never read by the forward's hidden states.
  OwnedDflashBatch changed = batch;
  changed.tokens[5] = (changed.tokens[5] + 1) % 12;
  for (int32_t& label : changed.labels) label = (label + 1) % 12;
  EXPECT_EQ(moved(changed), std::vector<bool>(nb, false));
}

// The loss recomputed from the block hidden states with the head, row by row.
TEST(DflashModelTest, LossWeightsEachPositionByItsDecay) {
  DflashConfig c = small_dflash_config(1);
  c.block_size = 5;
  const OwnedTargetWeights target = random_target(c, 31);
  BasicDflashModel<double> model(c, target.view(), 32);
  jitter(model, 33);
  const OwnedDflashBatch batch = random_dflash_batch(c, {0, 17, 40}, 7, 34, 4);
  const DflashStats stats = model.forward(batch.view());
  const size_t bs = c.block_size, d = c.width(), v = c.vocab_size;
  double weighted = 0, weight = 0;
  uint64_t counted = 0;
  for (size_t b = 0; b < batch.anchors.size(); ++b)
    for (size_t j = 1; j < bs; ++j) {
      // Rows past the anchor's document score nothing (a block its end cuts off).
      const size_t a = size_t(batch.anchors[b]);
      const size_t end =
          size_t(*std::upper_bound(batch.doc_offsets.begin(), batch.doc_offsets.end(), int32_t(a)));
      const int32_t label = a + j - 1 < end ? batch.labels[a + j - 1] : -1;
      if (label < 0) continue;
      const double* f = model.block_hidden().data() + (b * bs + j) * d;
      std::vector<double> logits(v);
      double top = -1e300;
      for (size_t k = 0; k < v; ++k) {
        for (size_t i = 0; i < d; ++i) logits[k] += f[i] * double(target.lm_head[k * d + i]);
        top = std::max(top, logits[k]);
      }
      double total = 0;
      for (double l : logits) total += std::exp(l - top);
      const double ce = top + std::log(total) - logits[size_t(label)];
      const double w = std::exp(-double(j - 1) / c.loss_gamma);
      weighted += w * ce;
      weight += w;
      ++counted;
    }
  EXPECT_EQ(stats.counted, counted);
  EXPECT_NEAR(stats.weight, weight, 1e-12 * weight);
  EXPECT_NEAR(stats.loss, weighted / weight, 1e-10 * stats.loss);
  // gamma matters: a flat weighting gives another loss over the same hidden states.
  DflashConfig flat = c;
  flat.loss_gamma = 1e9;
  BasicDflashModel<double> flat_model(flat, target.view(), 32);
  std::copy(model.params().begin(), model.params().end(), flat_model.params().begin());
  EXPECT_GT(std::abs(flat_model.forward(batch.view()).loss - stats.loss), 1e-6);
}

TEST(DflashModelTest, AcceptanceOnAHandMadeCase) {
  const DflashConfig c = small_dflash_config(1);  // B 4: positions 1, 2, 3 are drafted
  const OwnedTargetWeights target = random_target(c, 41);
  DflashModel model(c, target.view(), 42);
  OwnedDflashBatch batch = random_dflash_batch(c, {0, 30}, 0, 43, 0);
  batch.anchors = {2, 8, 14, 20};  // label rows 2-4, 8-10, 14-16, 20-22: disjoint
  model.forward(batch.view());
  const std::vector<int32_t> pred(model.predictions().begin(), model.predictions().end());
  for (size_t b = 0; b < 4; ++b) EXPECT_EQ(pred[b * 4], -1);
  // Labels made from the predictions: block 0 all right, block 1 right twice then wrong,
  // block 2 wrong first then right, block 3 right once then an ignored label.
  const auto set = [&](size_t b, size_t j, bool right) {
    const int32_t p = pred[b * 4 + j];
    batch.labels[size_t(batch.anchors[b]) + j - 1] = right ? p : (p + 1) % 13;
  };
  for (size_t j = 1; j <= 3; ++j) set(0, j, true);
  set(1, 1, true), set(1, 2, true), set(1, 3, false);
  set(2, 1, false), set(2, 2, true), set(2, 3, true);
  set(3, 1, true), set(3, 3, true);
  batch.labels[size_t(batch.anchors[3]) + 1] = -100;
  const DflashStats s = model.forward(batch.view());
  EXPECT_EQ(std::vector<int32_t>(model.predictions().begin(), model.predictions().end()), pred);
  EXPECT_EQ(s.blocks, 4u);
  EXPECT_EQ(s.accepted, 3u + 2u + 0u + 1u);
  EXPECT_DOUBLE_EQ(s.acceptance_length, 1.0 + 6.0 / 4.0);
  EXPECT_EQ(s.accepted_at, (std::vector<uint64_t>{4, 3, 2, 1}));
  EXPECT_EQ(s.counted, 11u);
  EXPECT_EQ(s.agreed, 3u + 2u + 2u + 2u);
}

TEST(DflashModelTest, RejectsBadBatchesAndWeights) {
  const DflashConfig c = small_dflash_config(1);
  const OwnedTargetWeights target = random_target(c, 51);
  DflashModel model(c, target.view(), 52);
  const OwnedDflashBatch good = random_dflash_batch(c, {0, 10, 20}, 4, 53);
  ASSERT_FALSE(good.anchors.empty());
  EXPECT_NO_THROW(model.forward(good.view()));
  const auto forward = [&](auto&& edit) {
    OwnedDflashBatch b = good;
    edit(b);
    model.forward(b.view());
  };
  const auto code = [&](auto&& edit) { return thrown_code([&] { forward(edit); }); };
  EXPECT_EQ(code([](OwnedDflashBatch& b) { b.features.pop_back(); }), Errc::kModel);
  EXPECT_EQ(code([](OwnedDflashBatch& b) { b.labels.pop_back(); }), Errc::kModel);
  EXPECT_EQ(code([](OwnedDflashBatch& b) { b.tokens[3] = 13; }), Errc::kModel);
  EXPECT_EQ(code([](OwnedDflashBatch& b) { b.labels[3] = 13; }), Errc::kModel);
  EXPECT_EQ(code([](OwnedDflashBatch& b) { b.positions[3] = -1; }), Errc::kModel);
  // The words of the checks both drafters share (train/drafter_batch.h), under this one's name.
  const auto message = [&](auto&& edit) { return thrown_message([&] { forward(edit); }); };
  EXPECT_EQ(message([](OwnedDflashBatch& b) { b.features.pop_back(); }),
            "dflash batch: features hold 639 values, 20 tokens of K*H 32 need 640");
  EXPECT_EQ(message([](OwnedDflashBatch& b) { b.labels.pop_back(); }),
            "dflash batch: 19 labels for 20 tokens");
  EXPECT_EQ(message([](OwnedDflashBatch& b) { b.positions[3] = -1; }),
            "dflash batch: position -1 of token 3 is negative");
  EXPECT_EQ(message([](OwnedDflashBatch& b) { b.labels[3] = 13; }),
            "dflash batch: label 13 of token 3 is outside the vocabulary of 13 (negative labels "
            "are ignored)");
  EXPECT_EQ(message([](OwnedDflashBatch& b) { b.tokens[3] = 13; }),
            "dflash batch: token 13 at 3 is outside the vocabulary of 13");
  EXPECT_EQ(code([](OwnedDflashBatch& b) { b.doc_offsets = {0, 10, 10, 20}; }), Errc::kModel);
  EXPECT_EQ(code([](OwnedDflashBatch& b) { b.anchors = {0}; }),
            Errc::kModel);  // no context
  EXPECT_EQ(code([](OwnedDflashBatch& b) { b.anchors = {10}; }),
            Errc::kModel);  // no context
  // 7 + 3 = 10: a block its document's end cuts off is valid (its last rows score nothing),
  // even one whose rows past the anchor all lie beyond it.
  EXPECT_NO_THROW(forward([](OwnedDflashBatch& b) { b.anchors = {7}; }));
  EXPECT_NO_THROW(forward([](OwnedDflashBatch& b) { b.anchors = {9}; }));
  EXPECT_EQ(code([](OwnedDflashBatch& b) { b.anchors = {20}; }), Errc::kModel);
  EXPECT_EQ(code([](OwnedDflashBatch& b) { b.anchors = {6, -1}; }), Errc::kModel);
  EXPECT_NO_THROW(forward([](OwnedDflashBatch& b) { b.anchors = {6}; }));
  // The target's weights must be V x D.
  std::vector<float> short_head(target.lm_head.begin(), target.lm_head.end() - 1);
  EXPECT_EQ(thrown_code([&] { DflashModel(c, {target.embed, short_head}); }), Errc::kModel);
  EXPECT_EQ(thrown_code([&] {
              model.set_target_weights({short_head, target.lm_head});
            }),
            Errc::kModel);
  DflashConfig bad = c;
  bad.mask_token_id = 13;
  EXPECT_EQ(thrown_code([&] { DflashModel(bad, target.view()); }), Errc::kModelBadConfig);

  // No anchors, or nothing counted: loss 0 and no gradient.
  OwnedDflashBatch none = good;
  none.anchors.clear();
  DflashStats s = model.forward_backward(none.view());
  EXPECT_EQ(s.blocks, 0u);
  EXPECT_EQ(s.loss, 0.0);
  EXPECT_EQ(s.accepted_at, std::vector<uint64_t>(c.block_size, 0));
  std::fill(none.labels.begin(), none.labels.end(), -100);
  none.anchors = good.anchors;
  s = model.forward_backward(none.view());
  EXPECT_EQ(s.counted, 0u);
  EXPECT_EQ(s.loss, 0.0);
  EXPECT_EQ(s.acceptance_length, 1.0);
  EXPECT_TRUE(std::ranges::all_of(model.grads(), [](float g) { return g == 0.0f; }));
}

TEST(DflashModelTest, ThreadCountDoesNotChangeBits) {
  DflashConfig c;
  c.num_captured = 2;
  c.target_hidden = 64;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 128;
  c.vocab_size = 64;
  c.block_size = 8;
  c.mask_token_id = 63;
  const OwnedTargetWeights target = random_target(c, 61);
  const OwnedDflashBatch batch = random_dflash_batch(c, {0, 50, 51, 200}, 12, 62);
  const auto run = [&](uint32_t threads) {
    DflashModel model(c, target.view(), 60, threads);
    const DflashStats s = model.forward_backward(batch.view());
    std::vector<double> out(model.grads().begin(), model.grads().end());
    out.push_back(s.loss);
    out.push_back(s.acceptance_length);
    out.insert(out.end(), model.block_hidden().begin(), model.block_hidden().end());
    return out;
  };
  const std::vector<double> one = run(1);
  EXPECT_EQ(run(2), one);
  EXPECT_EQ(run(4), one);
}

TEST(DflashModelTest, GradientsAccumulateAcrossBatches) {
  const DflashConfig c = small_dflash_config(1);
  const OwnedTargetWeights target = random_target(c, 71);
  DflashModel model(c, target.view(), 72);
  const OwnedDflashBatch batch = random_dflash_batch(c, {0, 24}, 5, 73);
  model.forward_backward(batch.view());
  const std::vector<float> once(model.grads().begin(), model.grads().end());
  model.forward_backward(batch.view());
  // Twice the gradient, up to the rounding of each addition into the float buffer (a tensor
  // such as k_proj takes several additions per batch: block rows, context rows).
  float scale = 0;
  for (float g : once) scale = std::max(scale, std::abs(g));
  for (size_t i = 0; i < once.size(); ++i)
    ASSERT_NEAR(model.grads()[i], 2 * once[i], 1e-6 * std::abs(once[i]) + 1e-6 * scale) << i;
  model.zero_grads();
  EXPECT_TRUE(std::ranges::all_of(model.grads(), [](float g) { return g == 0.0f; }));
}

TEST(DflashTrainingTest, LossFallsOnALearnableTask) {
  DflashConfig c = small_dflash_config(1);
  c.target_hidden = 32;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.intermediate_size = 64;
  const OwnedTargetWeights target = random_target(c, 81);
  DflashModel model(c, target.view(), 82);
  AdamWOptions options;
  options.schedule.peak_lr = 1e-2;
  options.schedule.min_lr = 1e-3;
  options.schedule.warmup_steps = 10;
  options.schedule.total_steps = 150;
  AdamW adamw(options, model.layout());
  double first = 0, last = 0, first_tau = 0, last_tau = 0;
  for (uint64_t step = 0; step < 150; ++step) {
    const OwnedDflashBatch batch = testing::synthetic_dflash_batch(c, {0, 40, 64}, 16, 1000 + step);
    model.zero_grads();
    const DflashStats s = model.forward_backward(batch.view());
    adamw.update(model.params(), model.grads());
    if (step < 5) first += s.loss / 5, first_tau += s.acceptance_length / 5;
    if (step >= 145) last += s.loss / 5, last_tau += s.acceptance_length / 5;
  }
  std::printf("dflash training: loss %.4f -> %.4f, tau %.3f -> %.3f\n", first, last, first_tau,
              last_tau);
  EXPECT_LT(last, 0.3 * first) << "first " << first << ", last " << last;
  EXPECT_GT(last_tau, first_tau + 0.5) << "tau from " << first_tau << " to " << last_tau;
}

}  // namespace
}  // namespace hsring::train
