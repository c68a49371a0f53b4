#include "train/same_position_trainer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "model/cpu_target_model.h"
#include "test_batches.h"

namespace hsring::train {
namespace {

using testing::OwnedBatch;
using testing::synthetic_batch;

// K 2 x H 16 -> D 32, heads 2/1 x 16, inter 64, vocab 32, window 8: ~12k parameters.
SamePositionConfig run_config() {
  SamePositionConfig c;
  c.num_captured = 2;
  c.target_hidden = 16;
  c.width = 32;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 16;
  c.intermediate_size = 64;
  c.vocab_size = 32;
  c.window = 8;
  return c;
}

SamePositionTrainerOptions run_options(uint64_t total_steps, uint32_t threads = 1) {
  SamePositionTrainerOptions o;
  o.model = run_config();
  o.optimizer.schedule = {1e-2, 1e-3, 10, total_steps};
  o.seed = 5;
  o.threads = threads;
  return o;
}

// Three documents of 16, 16 and 32 tokens.
OwnedBatch run_batch(uint64_t step) {
  return synthetic_batch(run_config(), {0, 16, 32, 64}, 1000 + step);
}

TEST(TrainerTest, LossFallsOnALearnableTask) {
  constexpr uint64_t kSteps = 150;
  SamePositionTrainer trainer(run_options(kSteps));
  const auto start = std::chrono::steady_clock::now();
  double first = 0, last = 0, last_agreement = 0;
  for (uint64_t step = 0; step < kSteps; ++step) {
    const OwnedBatch batch = run_batch(step);
    const StepStats s = trainer.step(batch.view());
    ASSERT_TRUE(std::isfinite(s.loss)) << "step " << step;
    ASSERT_FALSE(s.skipped) << "step " << step;
    if (step < 5) first += s.loss / 5;
    if (step >= kSteps - 10) {
      last += s.loss / 10;
      last_agreement += s.agreement / 10;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("loss %.3f -> %.3f, agreement %.3f, %llu steps in %.2f s\n", first, last,
              last_agreement, static_cast<unsigned long long>(kSteps), seconds);
  // Chance is ln 32 = 3.47: the loss must fall well below a third of where it started.
  EXPECT_GT(first, 3.0);
  EXPECT_LT(last, first * 0.3);
  EXPECT_GT(last_agreement, 0.9);
  // Held-out batch: the mapping was learnt, not the batches.
  const OwnedBatch held_out = run_batch(999999);
  EXPECT_LT(trainer.evaluate(held_out.view()).loss, first * 0.3);
}

TEST(TrainerTest, StepReportsItsStats) {
  SamePositionTrainer trainer(run_options(100));
  const OwnedBatch batch = run_batch(0);
  const StepStats s = trainer.step(batch.view());
  const auto counted = uint64_t(
      std::count_if(batch.labels.begin(), batch.labels.end(), [](int32_t l) { return l >= 0; }));
  EXPECT_EQ(s.tokens, 64u);
  EXPECT_EQ(s.counted, counted);
  EXPECT_EQ(s.step, 1u);
  EXPECT_DOUBLE_EQ(s.lr, 1e-3);  // warmup: 1 / 10 of the peak
  EXPECT_GT(s.grad_norm, 0);
  EXPECT_GT(s.step_ms, 0);
  EXPECT_GT(s.tokens_per_s, 0);
  EXPECT_GE(s.agreement, 0);
  EXPECT_LE(s.agreement, 1);
  EXPECT_EQ(trainer.optimizer().step(), 1u);
}

TEST(TrainerTest, SameSeedAndBatchesGiveSameBitsForAnyThreadCount) {
  const auto train = [](uint32_t threads) {
    SamePositionTrainerOptions o = run_options(20, threads);
    // Wide enough that every op splits its work over threads.
    o.model.target_hidden = 64;
    o.model.width = 64;
    o.model.intermediate_size = 128;
    o.model.embed_tokens = true;
    SamePositionTrainer trainer(o);
    std::vector<double> losses;
    for (uint64_t step = 0; step < 4; ++step) {
      const OwnedBatch batch = synthetic_batch(o.model, {0, 40, 41, 128}, step);
      losses.push_back(trainer.step(batch.view()).loss);
    }
    std::vector<float> state(trainer.model().params().begin(), trainer.model().params().end());
    const std::span<const float> m = trainer.optimizer().first_moment();
    const std::span<const float> v = trainer.optimizer().second_moment();
    state.insert(state.end(), m.begin(), m.end());
    state.insert(state.end(), v.begin(), v.end());
    return std::make_pair(losses, state);
  };
  const auto one = train(1);
  EXPECT_EQ(train(1), one);  // two trainers, same seed and batches
  EXPECT_EQ(train(2), one);
  EXPECT_EQ(train(3), one);
}

TEST(TrainerTest, SplitStepEqualsStep) {
  SamePositionTrainer whole(run_options(100)), split(run_options(100));
  for (uint64_t step = 0; step < 3; ++step) {
    const OwnedBatch batch = run_batch(step);
    whole.step(batch.view());
    split.compute_gradients(batch.view());
    split.apply_gradients();
  }
  EXPECT_TRUE(std::ranges::equal(whole.model().params(), split.model().params()));
}

TEST(TrainerTest, TokenWeightedGradientsOfPartsSumToTheWhole) {
  // Two processes' batches A and B: scaling each one's mean-loss gradient by its share of
  // the counted tokens and summing gives the gradient of the packed batch A + B.
  const SamePositionConfig c = run_config();
  const OwnedBatch a = synthetic_batch(c, {0, 10, 24}, 1);
  const OwnedBatch b = synthetic_batch(c, {0, 30}, 2);
  OwnedBatch ab = a;
  ab.features.insert(ab.features.end(), b.features.begin(), b.features.end());
  for (auto [to, from] :
       {std::pair{&ab.tokens, &b.tokens}, {&ab.positions, &b.positions}, {&ab.labels, &b.labels}})
    to->insert(to->end(), from->begin(), from->end());
  ab.doc_offsets = {0, 10, 24, 54};

  SamePositionTrainer whole(run_options(100)), parts(run_options(100));
  const LossStats all = whole.compute_gradients(ab.view());
  const LossStats sa = parts.compute_gradients(a.view());
  parts.scale_gradients(float(sa.counted) / float(all.counted));
  const std::vector<float> from_a(parts.gradients().begin(), parts.gradients().end());
  const LossStats sb = parts.compute_gradients(b.view());
  parts.scale_gradients(float(sb.counted) / float(all.counted));
  ASSERT_EQ(sa.counted + sb.counted, all.counted);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < from_a.size(); ++i) {
    const double summed = double(from_a[i]) + double(parts.gradients()[i]);
    worst = std::max(worst, std::abs(summed - double(whole.gradients()[i])));
    scale = std::max(scale, std::abs(double(whole.gradients()[i])));
  }
  EXPECT_LT(worst, 1e-5 * scale);
  EXPECT_NEAR(all.loss,
              (sa.loss * double(sa.counted) + sb.loss * double(sb.counted)) / double(all.counted),
              1e-9);
}

TEST(TrainerTest, TrainsOnTheTinyTargetsCapturedStates) {
  // The real pipeline in miniature: the tiny target's captured layers and greedy labels,
  // a default drafter whose LM head starts as the target's.
  const auto target = open_cpu_model("tiny", 3, CpuModelOptions{1});
  const ModelConfig& tc = target->config();
  constexpr uint32_t kCaptured = 3;
  SamePositionTrainerOptions o;
  o.model = default_same_position_config(tc, kCaptured);
  const std::vector<float>& head = target->weights().lm_head_or_embeddings();
  o.lm_head_init.assign(head.begin(), head.end());
  o.optimizer.schedule = {3e-3, 3e-3, 0, 0};
  o.threads = 1;
  SamePositionTrainer trainer(o);
  EXPECT_TRUE(std::ranges::equal(trainer.model().param("lm_head.weight"), head));

  std::vector<int32_t> tokens(48), positions(48);
  for (size_t t = 0; t < tokens.size(); ++t) {
    tokens[t] = int32_t((t * 37 + 11) % tc.vocab_size);
    positions[t] = int32_t(t < 20 ? t : t - 20);
  }
  const std::vector<int32_t> offsets = {0, 20, 48};
  ForwardRequest request;
  request.capture_layers = default_capture_layers(tc.num_layers, kCaptured);
  ForwardOutput out;
  target->forward(PackedBatch{tokens, positions, offsets}, request, out);
  // [K][T * H] -> [T, K * H]: a token's K layers side by side.
  const size_t h = tc.hidden_size, rows = tokens.size();
  std::vector<float> features(rows * kCaptured * h);
  for (size_t k = 0; k < kCaptured; ++k)
    for (size_t t = 0; t < rows; ++t)
      std::copy_n(out.captured[k].begin() + std::ptrdiff_t(t * h), h,
                  features.begin() + std::ptrdiff_t((t * kCaptured + k) * h));
  const DrafterBatch batch{features, tokens, positions, offsets, out.greedy};
  const double before = trainer.step(batch).loss;
  double after = before;
  for (int i = 0; i < 5; ++i) after = trainer.step(batch).loss;
  EXPECT_LT(after, before);
}

}  // namespace
}  // namespace hsring::train
