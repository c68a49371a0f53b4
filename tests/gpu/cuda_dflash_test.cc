// The CUDA DFlash step (train/cuda_dflash_trainer.h) against the CPU DflashTrainer on the
// same weights, batches and anchors. In fp32 (GemmPrecision::kFp32) the two must agree to
// float rounding: every kernel's maths, the block attention's mask and the backward's
// wiring. In bf16 (the default) they must agree to bf16 rounding.
#include "train/cuda_dflash_trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/random.h"
#include "gpu/cuda_handles.h"
#include "gpu_test_util.h"
#include "param_compare.h"

namespace hsring::train {
namespace {

using gpu_test::expect_tensors_close;

struct Case {
  const char* name;
  DflashConfig config;
  std::vector<int32_t> doc_offsets;
  size_t anchors;
  DflashLabels labels;
};

// gtest names a parameter by this (not by its bytes).
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

DflashConfig make_config(uint32_t k, uint32_t h, uint32_t layers, uint32_t heads, uint32_t kv,
                         uint32_t hd, uint32_t inter, uint32_t vocab, uint32_t block) {
  DflashConfig c;
  c.num_captured = k;
  c.target_hidden = h;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv;
  c.head_dim = hd;
  c.intermediate_size = inter;
  c.vocab_size = vocab;
  c.block_size = block;
  c.mask_token_id = int32_t(vocab - 1);
  c.loss_gamma = 2.0;
  return c;
}

// A: grouped-query attention, 2 layers, small blocks, data labels. B: 8 query heads on
// one KV head with B 16 (128 query vectors: two query chunks per block), context tiles
// that straddle documents, target labels with ignored rows. C: B 40 (two block key tiles).
std::vector<Case> cases() {
  return {
      {"gqa", make_config(3, 64, 2, 4, 2, 32, 96, 50, 4), {0, 21, 40, 70}, 8, DflashLabels::kData},
      {"chunks",
       make_config(2, 64, 1, 8, 1, 64, 80, 40, 16),
       {0, 50, 90, 160},
       6,
       DflashLabels::kTarget},
      {"long_block",
       make_config(2, 32, 1, 2, 2, 32, 48, 30, 40),
       {0, 100, 150},
       3,
       DflashLabels::kData},
  };
}

std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.0f) {
  std::vector<float> out(n);
  uint64_t state = seed;
  for (float& v : out)
    v = scale * (float(double(splitmix64(state) >> 11) / double(1ull << 53)) * 2.0f - 1.0f);
  return out;
}

struct OwnedBatch {
  std::vector<float> features;
  std::vector<int32_t> tokens, positions, doc_offsets, labels;
  DrafterBatch view() const { return {features, tokens, positions, doc_offsets, labels}; }
};

OwnedBatch random_batch(const DflashConfig& c, const std::vector<int32_t>& offsets, uint64_t seed) {
  OwnedBatch b;
  const size_t t = size_t(offsets.back());
  b.features = random_floats(t * c.feature_dim(), seed);
  b.doc_offsets = offsets;
  uint64_t state = seed ^ 0x7777;
  for (size_t d = 0; d + 1 < offsets.size(); ++d)
    for (int32_t i = offsets[d]; i < offsets[d + 1]; ++i) {
      b.tokens.push_back(int32_t(splitmix64(state) % (c.vocab_size - 1)));
      b.positions.push_back(i - offsets[d]);
      b.labels.push_back(i % 5 == 1 ? -100 : int32_t(splitmix64(state) % c.vocab_size));
    }
  return b;
}

DflashTrainerOptions options_for(const Case& k, uint64_t seed = 11) {
  DflashTrainerOptions o;
  o.model = k.config;
  o.optimizer.schedule = {1e-2, 1e-3, 10, 100};
  o.seed = seed;
  o.threads = 1;
  o.anchors = k.anchors;
  o.labels = k.labels;
  const size_t n = size_t(k.config.vocab_size) * k.config.width();
  o.embed = random_floats(n, 5);
  o.lm_head = random_floats(n, 6);
  return o;
}

class CudaDflashTest : public ::testing::TestWithParam<Case> {};

void compare_with_cpu(const Case& k, GemmPrecision precision, double loss_tolerance,
                      double grad_tolerance, double param_tolerance) {
  DflashTrainer cpu(options_for(k));
  CudaDflashTrainer gpu(options_for(k), precision);
  ASSERT_EQ(gpu.params(),
            std::vector<float>(cpu.model().params().begin(), cpu.model().params().end()))
      << "both initialise from the same host function";
  for (uint64_t step = 0; step < 2; ++step) {
    const OwnedBatch batch = random_batch(k.config, k.doc_offsets, 100 + step);
    const LossStats want = cpu.compute_gradients(batch.view());
    const LossStats got = gpu.compute_gradients(batch.view());
    ASSERT_GT(want.counted, 0u);
    EXPECT_NEAR(got.loss, want.loss, loss_tolerance * want.loss) << "step " << step;
    EXPECT_EQ(got.counted, want.counted);
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(gpu.last_stats().blocks, cpu.last_stats().blocks) << "the same anchors";
    EXPECT_NEAR(gpu.last_stats().weight, cpu.last_stats().weight, 1e-9);
    EXPECT_NEAR(double(got.agreed), double(want.agreed), 1.0) << "a near-tie may flip one argmax";
    EXPECT_NEAR(got.acceptance_length, want.acceptance_length,
                1.0 / double(cpu.last_stats().blocks) + 1e-9);
    std::printf("[ cuda     ] %s step %llu: loss %.6f / %.6f, tau %.3f / %.3f\n", k.name,
                (unsigned long long)step, got.loss, want.loss, got.acceptance_length,
                want.acceptance_length);
    if (step == 0)
      expect_tensors_close(cpu.layout(), gpu.gradients(), cpu.model().grads(), grad_tolerance,
                           std::string(k.name) + " gradient");
    const UpdateStats want_update = cpu.apply_gradients();
    const UpdateStats got_update = gpu.apply_gradients();
    EXPECT_NEAR(got_update.grad_norm, want_update.grad_norm,
                grad_tolerance * want_update.grad_norm);
    EXPECT_EQ(got_update.step, want_update.step);
    EXPECT_DOUBLE_EQ(got_update.lr, want_update.lr);
    EXPECT_EQ(got_update.clipped, want_update.clipped);
    expect_tensors_close(
        cpu.layout(), gpu.params(), cpu.model().params(), param_tolerance,
        std::string(k.name) + (step == 0 ? " weights after step 1" : " weights after step 2"));
  }
  const TrainerState state = gpu.state();
  const TrainerState want_state = cpu.state();
  expect_tensors_close(cpu.layout(), state.first_moment, want_state.first_moment, grad_tolerance,
                       std::string(k.name) + " AdamW first moment");
  EXPECT_EQ(state.step, 2u);
}

TEST_P(CudaDflashTest, Fp32StepMatchesTheCpuReference) {
  HSRING_REQUIRE_GPUS(1);
  compare_with_cpu(GetParam(), GemmPrecision::kFp32, 1e-5, 1e-4, 1e-5);
}

TEST_P(CudaDflashTest, Bf16StepStaysWithinBf16Rounding) {
  HSRING_REQUIRE_GPUS(1);
  compare_with_cpu(GetParam(), GemmPrecision::kBf16, 1e-2, 3e-2, 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaDflashTest, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(CudaDflashDeviceTest, Bf16DeviceFeaturesEqualTheSameValuesFromTheHost) {
  HSRING_REQUIRE_GPUS(1);
  const Case k = cases()[0];
  OwnedBatch batch = random_batch(k.config, k.doc_offsets, 7);
  std::vector<uint16_t> bf16(batch.features.size());
  for (size_t i = 0; i < bf16.size(); ++i) {
    bf16[i] = gpu_test::float_to_bf16(batch.features[i]);
    batch.features[i] = gpu_test::bf16_to_float(bf16[i]);  // the values the ring carries
  }
  gpu::DeviceBuffer device = gpu::DeviceBuffer::allocate(bf16.size() * sizeof(uint16_t));
  HSRING_CUDA_CHECK(cudaMemcpy(device.data(), bf16.data(), device.size(), cudaMemcpyHostToDevice));
  CudaDflashTrainer from_host(options_for(k)), from_device(options_for(k));
  const LossStats want = from_host.compute_gradients(batch.view());
  const LossStats got = from_device.compute_gradients_bf16(device.as<uint16_t>(), batch.view());
  EXPECT_NEAR(got.loss, want.loss, 1e-6 * want.loss);
  EXPECT_EQ(got.agreed, want.agreed);
  EXPECT_EQ(got.acceptance_length, want.acceptance_length);
  expect_tensors_close(from_host.layout(), from_device.gradients(), from_host.gradients(), 1e-5,
                       "gradient from device features");
}

TEST(CudaDflashDeviceTest, StateRoundTripsIntoAnotherTrainer) {
  HSRING_REQUIRE_GPUS(1);
  const Case k = cases()[0];
  CudaDflashTrainer first(options_for(k));
  for (uint64_t step = 0; step < 3; ++step)
    first.step(random_batch(k.config, k.doc_offsets, step).view());
  const TrainerState saved = first.state();
  // The same seed (it also draws the anchors), weights moved by a step on another batch:
  // all of it is overwritten by the state.
  CudaDflashTrainer second(options_for(k));
  second.step(random_batch(k.config, k.doc_offsets, 1234).view());
  second.load_state(saved);
  EXPECT_EQ(second.optimizer_step(), 3u);
  EXPECT_EQ(second.params(), saved.params);
  const OwnedBatch next = random_batch(k.config, k.doc_offsets, 42);
  const StepStats a = first.step(next.view());
  const StepStats b = second.step(next.view());
  EXPECT_NEAR(a.loss, b.loss, 1e-6 * a.loss) << "the same anchors at the same step";
  EXPECT_EQ(a.step, 4u);
  EXPECT_EQ(b.step, 4u);
  expect_tensors_close(first.layout(), second.params(), first.params(), 1e-5,
                       "weights of the copy");
  // And the CPU trainer takes the GPU's state: one checkpoint format for both.
  DflashTrainer cpu(options_for(k));
  cpu.load_state(first.state());
  EXPECT_EQ(cpu.optimizer_step(), 4u);
}

// The head's logits of a production vocabulary do not fit at once: it runs over the scored
// rows in chunks (gather, logits, cross-entropy, d(final) scattered back), which the small
// vocabularies above never need. Chunks of 7 rows (the last one shorter) must give the step
// of one chunk.
TEST(CudaDflashDeviceTest, TheHeadInChunksGivesTheStepOfOneChunk) {
  HSRING_REQUIRE_GPUS(1);
  const Case k = cases()[1];  // 6 blocks of 16: 90 scored rows
  const size_t chunk = 7 * size_t(k.config.vocab_size);
  for (const auto& [precision, tolerance] :
       {std::pair{GemmPrecision::kFp32, 1e-5}, {GemmPrecision::kBf16, 1e-4}}) {
    const char* name = precision == GemmPrecision::kFp32 ? "fp32" : "bf16";
    CudaDflashTrainer whole(options_for(k), precision), chunked(options_for(k), precision, chunk);
    for (uint64_t step = 0; step < 2; ++step) {
      const OwnedBatch batch = random_batch(k.config, k.doc_offsets, 500 + step);
      const LossStats want = whole.compute_gradients(batch.view());
      const LossStats got = chunked.compute_gradients(batch.view());
      ASSERT_GT(want.counted, 0u);
      EXPECT_NEAR(got.loss, want.loss, 1e-6 * want.loss) << name << " step " << step;
      EXPECT_EQ(got.counted, want.counted) << name;
      // cuBLAS may pick another kernel for another row count: in bf16 a logit may round the
      // other way, and a near-tie flip one argmax.
      EXPECT_NEAR(double(got.agreed), double(want.agreed),
                  precision == GemmPrecision::kFp32 ? 0 : 1)
          << name;
      expect_tensors_close(whole.layout(), chunked.gradients(), whole.gradients(), tolerance,
                           std::string(name) + " gradient, head in chunks of 7 rows");
      whole.apply_gradients();
      chunked.apply_gradients();
    }
  }
}

TEST(CudaDflashDeviceTest, LossFallsOnTheGpu) {
  HSRING_REQUIRE_GPUS(1);
  Case k = cases()[0];
  k.labels = DflashLabels::kData;
  CudaDflashTrainer trainer(options_for(k));
  // One fixed batch: the step must be able to fit it.
  const OwnedBatch batch = random_batch(k.config, k.doc_offsets, 3);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    const StepStats s = trainer.step(batch.view());
    ASSERT_TRUE(std::isfinite(s.loss));
    if (step == 0) first = s.loss;
    last = s.loss;
  }
  std::printf("[ cuda     ] loss %.3f -> %.3f\n", first, last);
  EXPECT_LT(last, 0.5 * first);
}

TEST(CudaDflashDeviceTest, BadShapesBatchesAndStatesAreRefused) {
  HSRING_REQUIRE_GPUS(1);
  // A shape the GPU step does not take is refused as a bad config, by name.
  const auto expect_refused = [](const Case& shape, const std::string& named) {
    try {
      CudaDflashTrainer trainer(options_for(shape));
      ADD_FAILURE() << "accepted; expected a refusal naming '" << named << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kModelBadConfig);
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
  };
  Case odd = cases()[0];
  odd.config.head_dim = 16;
  odd.config.num_heads = 8;
  odd.config.num_kv_heads = 4;
  expect_refused(odd, "head_dim 16");
  // [Wq; Wk; Wv] are multiplied as one matrix: a width that leaves a gap after k_proj
  // (kv_dim 32 x 65 is not a multiple of the layout's alignment).
  Case gapped = cases()[0];
  gapped.config.num_heads = 2;
  gapped.config.num_kv_heads = 1;
  gapped.config.target_hidden = 65;
  expect_refused(gapped, "q, k and v projections");
  const Case k = cases()[0];
  CudaDflashTrainer trainer(options_for(k));
  OwnedBatch batch = random_batch(k.config, k.doc_offsets, 1);
  batch.tokens[3] = int32_t(k.config.vocab_size);
  EXPECT_THROW(trainer.compute_gradients(batch.view()), Error);
  TrainerState wrong = trainer.state();
  wrong.second_moment.pop_back();
  EXPECT_THROW(trainer.load_state(wrong), Error);
  EXPECT_EQ(trainer.optimizer_step(), 0u) << "a refused state changes nothing";
}

}  // namespace
}  // namespace hsring::train
