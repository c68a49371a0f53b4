// The CUDA drafter step against the CPU reference (train/same_position_trainer.h) on the same
// weights and batches. In fp32 (GemmPrecision::kFp32) the two must agree to float rounding: that
// checks every kernel's maths and the backward's wiring. In bf16 (the default) they must agree to
// bf16 rounding, and a short run must learn.
#include "train/cuda_same_position_trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/error.h"
#include "gpu/cuda_handles.h"
#include "gpu_test_util.h"
#include "param_compare.h"
#include "tests/train/test_batches.h"

namespace hsring::train {
namespace {

using gpu_test::expect_tensors_close;
using testing::OwnedBatch;

// K 3 x H 48 -> D 64, heads 4/2 x 32, inter 96, vocab 50, window 8: windows shorter than
// the documents, grouped-query attention, and every op on shapes that are not powers of two.
SamePositionConfig gpu_config(bool embed_tokens) {
  SamePositionConfig c;
  c.num_captured = 3;
  c.target_hidden = 48;
  c.width = 64;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.intermediate_size = 96;
  c.vocab_size = 50;
  c.window = 8;
  c.embed_tokens = embed_tokens;
  return c;
}

SamePositionTrainerOptions options_for(const SamePositionConfig& config,
                                       uint64_t total_steps = 100) {
  SamePositionTrainerOptions o;
  o.model = config;
  o.optimizer.schedule = {1e-2, 1e-3, 10, total_steps};
  o.seed = 11;
  o.threads = 1;
  return o;
}

class CudaSamePositionTrainerTest : public ::testing::TestWithParam<bool> {};  // embed_tokens

// Two steps on two batches: the gradients after the first, the weights after each.
void compare_with_cpu(bool embed_tokens, GemmPrecision precision, double loss_tolerance,
                      double grad_tolerance, double param_tolerance) {
  const SamePositionConfig config = gpu_config(embed_tokens);
  SamePositionTrainer cpu(options_for(config));
  CudaSamePositionTrainer gpu(options_for(config), precision);
  ASSERT_EQ(gpu.params(),
            std::vector<float>(cpu.model().params().begin(), cpu.model().params().end()))
      << "both initialise from the same host function";
  for (uint64_t step = 0; step < 2; ++step) {
    const OwnedBatch batch = testing::random_batch(config, {0, 5, 21, 40, 70}, 100 + step);
    const LossStats want = cpu.compute_gradients(batch.view());
    const LossStats got = gpu.compute_gradients(batch.view());
    EXPECT_NEAR(got.loss, want.loss, loss_tolerance * want.loss) << "step " << step;
    EXPECT_EQ(got.counted, want.counted);
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_NEAR(double(got.agreed), double(want.agreed), 1.0) << "a near-tie may flip one argmax";
    if (step == 0)
      expect_tensors_close(cpu.layout(), gpu.gradients(), cpu.gradients(), grad_tolerance,
                           "gradient");
    const UpdateStats want_update = cpu.apply_gradients();
    const UpdateStats got_update = gpu.apply_gradients();
    EXPECT_NEAR(got_update.grad_norm, want_update.grad_norm,
                grad_tolerance * want_update.grad_norm);
    EXPECT_EQ(got_update.step, want_update.step);
    EXPECT_DOUBLE_EQ(got_update.lr, want_update.lr);
    EXPECT_EQ(got_update.clipped, want_update.clipped);
    expect_tensors_close(cpu.layout(), gpu.params(), cpu.model().params(), param_tolerance,
                         step == 0 ? "weights after step 1" : "weights after step 2");
  }
  const TrainerState state = gpu.state();
  expect_tensors_close(cpu.layout(), state.first_moment, cpu.optimizer().first_moment(),
                       grad_tolerance, "AdamW first moment");
  EXPECT_EQ(state.step, 2u);
}

TEST_P(CudaSamePositionTrainerTest, Fp32StepMatchesTheCpuReference) {
  HSRING_REQUIRE_GPUS(1);
  // The CPU sums in double, the GPU in float (and in another order): within 1e-6 on an H200.
  compare_with_cpu(GetParam(), GemmPrecision::kFp32, 1e-5, 2e-4, 1e-5);
}

TEST_P(CudaSamePositionTrainerTest, Bf16StepStaysWithinBf16Rounding) {
  HSRING_REQUIRE_GPUS(1);
  // bf16 keeps 8 bits of mantissa (2^-8 = 4e-3 relative per product input).
  // Measured on an H200: gradients within 9e-4, weights within 6e-4 (2026-11-30).
  compare_with_cpu(GetParam(), GemmPrecision::kBf16, 1e-2, 1e-2, 5e-3);
}

INSTANTIATE_TEST_SUITE_P(Embedding, CudaSamePositionTrainerTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "embed" : "features"; });

uint16_t to_bf16(float value) { return gpu_test::float_to_bf16(value); }

TEST(CudaTrainerDeviceTest, Bf16DeviceFeaturesEqualTheSameValuesFromTheHost) {
  HSRING_REQUIRE_GPUS(1);
  const SamePositionConfig config = gpu_config(false);
  OwnedBatch batch = testing::random_batch(config, {0, 30, 64}, 7);
  std::vector<uint16_t> bf16(batch.features.size());
  for (size_t i = 0; i < bf16.size(); ++i) {
    bf16[i] = to_bf16(batch.features[i]);
    batch.features[i] = gpu_test::bf16_to_float(bf16[i]);  // the values the ring carries
  }
  gpu::DeviceBuffer device = gpu::DeviceBuffer::allocate(bf16.size() * sizeof(uint16_t));
  HSRING_CUDA_CHECK(cudaMemcpy(device.data(), bf16.data(), device.size(), cudaMemcpyHostToDevice));

  CudaSamePositionTrainer from_host(options_for(config)), from_device(options_for(config));
  const LossStats want = from_host.compute_gradients(batch.view());
  const LossStats got = from_device.compute_gradients_bf16(device.as<uint16_t>(), batch.view());
  EXPECT_NEAR(got.loss, want.loss, 1e-6 * want.loss);
  EXPECT_EQ(got.agreed, want.agreed);
  // The norm weights' gradients add chunk sums with atomics: last bits may differ.
  expect_tensors_close(from_host.layout(), from_device.gradients(), from_host.gradients(), 1e-5,
                       "gradient from device features");
}

TEST(CudaTrainerDeviceTest, LossFallsOnTheGpu) {
  HSRING_REQUIRE_GPUS(1);
  constexpr uint64_t kSteps = 150;
  const SamePositionConfig config = gpu_config(false);
  CudaSamePositionTrainer trainer(options_for(config, kSteps));
  double first = 0, last = 0, last_agreement = 0, step_ms = 0;
  for (uint64_t step = 0; step < kSteps; ++step) {
    const OwnedBatch batch = testing::synthetic_batch(config, {0, 16, 32, 64}, 1000 + step);
    const StepStats s = trainer.step(batch.view());
    ASSERT_TRUE(std::isfinite(s.loss)) << "step " << step;
    ASSERT_FALSE(s.skipped) << "step " << step;
    if (step < 5) first += s.loss / 5;
    if (step >= kSteps - 10) {
      last += s.loss / 10;
      last_agreement += s.agreement / 10;
      step_ms += s.step_ms / 10;
    }
  }
  std::printf("[ cuda     ] loss %.3f -> %.3f, agreement %.3f, %.2f ms per step\n", first, last,
              last_agreement, step_ms);
  // Chance is ln 50 = 3.9.
  EXPECT_GT(first, 3.0);
  EXPECT_LT(last, first * 0.3);
  EXPECT_GT(last_agreement, 0.9);
  const OwnedBatch held_out = testing::synthetic_batch(config, {0, 16, 32, 64}, 999999);
  EXPECT_LT(trainer.evaluate(held_out.view()).loss, first * 0.3);
}

TEST(CudaTrainerDeviceTest, StateRoundTripsIntoAnotherTrainer) {
  HSRING_REQUIRE_GPUS(1);
  const SamePositionConfig config = gpu_config(true);
  CudaSamePositionTrainer first(options_for(config));
  for (uint64_t step = 0; step < 3; ++step)
    first.step(testing::random_batch(config, {0, 20, 48}, step).view());
  const TrainerState saved = first.state();
  SamePositionTrainerOptions other = options_for(config);
  other.seed = 99;  // different initial weights, all overwritten by the state
  CudaSamePositionTrainer second(other);
  second.load_state(saved);
  EXPECT_EQ(second.optimizer_step(), 3u);
  EXPECT_EQ(second.params(), saved.params);
  const OwnedBatch next = testing::random_batch(config, {0, 33, 48}, 42);
  const StepStats a = first.step(next.view());
  const StepStats b = second.step(next.view());
  EXPECT_NEAR(a.loss, b.loss, 1e-6 * a.loss);
  EXPECT_EQ(a.step, 4u);
  EXPECT_EQ(b.step, 4u);
  expect_tensors_close(first.layout(), second.params(), first.params(), 1e-5,
                       "weights of the copy");
}

TEST(CudaTrainerDeviceTest, BadShapesBatchesAndStatesAreRefused) {
  HSRING_REQUIRE_GPUS(1);
  SamePositionConfig odd = gpu_config(false);
  odd.head_dim = 16;
  odd.num_heads = 8;
  odd.num_kv_heads = 4;
  try {
    CudaSamePositionTrainer trainer(options_for(odd));
    ADD_FAILURE() << "head_dim 16 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kModelBadConfig);
    EXPECT_NE(std::string(e.what()).find("head_dim 16"), std::string::npos) << e.what();
  }

  // One q head of 32 at width 33: 1056 values of q_proj, not a multiple of the layout's
  // alignment, so a gap follows it and [Wq; Wk; Wv] is not one matrix.
  SamePositionConfig gapped = gpu_config(false);
  gapped.width = 33;
  gapped.num_heads = 1;
  gapped.num_kv_heads = 1;
  try {
    CudaSamePositionTrainer trainer(options_for(gapped));
    ADD_FAILURE() << "q, k and v projections with gaps between them were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kModelBadConfig);
    EXPECT_NE(std::string(e.what()).find("as one matrix"), std::string::npos) << e.what();
  }

  const SamePositionConfig config = gpu_config(false);
  CudaSamePositionTrainer trainer(options_for(config));
  OwnedBatch batch = testing::random_batch(config, {0, 10}, 1);
  batch.labels[3] = int32_t(config.vocab_size);
  try {
    trainer.compute_gradients(batch.view());
    ADD_FAILURE() << "a label outside the vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kModel);
    EXPECT_NE(std::string(e.what()).find("label 50"), std::string::npos) << e.what();
  }
  TrainerState wrong = trainer.state();
  wrong.second_moment.pop_back();
  EXPECT_THROW(trainer.load_state(wrong), Error);
  EXPECT_EQ(trainer.optimizer_step(), 0u) << "a refused state changes nothing";
}

}  // namespace
}  // namespace hsring::train
