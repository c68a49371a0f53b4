// The CUDA mixture-of-experts MLP (model/cuda_moe_mlp.h) against the CPU's (model/cpu_moe.h)
// on one fp32 residual and the same bf16 weights: the router picks the same experts with the
// same weights (its logits are fp32-exact on both sides), the block's output is within bf16
// rounding, experts that get no token and experts whose rows span several tiles included;
// and the routing kernel against route_token on exact ties.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/cuda_handles.h"
#include "gpu_test_util.h"
#include "model/cpu_moe.h"
#include "model/cuda_blas.h"
#include "model/cuda_moe.h"
#include "model/cuda_moe_mlp.h"
#include "model/cuda_scratch.h"
#include "model/cuda_weights.h"
#include "model/float_convert.h"
#include "model/moe_router.h"
#include "model_test_util.h"
#include "ops/linear.h"
#include "ops/rms_norm.h"

namespace hsring {
namespace {

using gpu_test::bf16_weights;
using gpu_test::relative_error;

struct MoeCase {
  const char* name;
  uint32_t tokens, hidden, experts, top_k, expert_inter, shared_inter;
  bool normalise;
};

// Test names and ctest's labels show the case's name, not its bytes.
void PrintTo(const MoeCase& m, std::ostream* os) { *os << m.name; }

// A one-layer mixture model: only its layer 0's MLP is used here.
ModelConfig moe_config(const MoeCase& m) {
  ModelConfig c = named_model_config("tiny");
  c.name = std::string("test-moe-") + m.name;
  c.model_type = "qwen3_moe";
  c.hidden_size = m.hidden;
  c.intermediate_size = 0;
  c.num_layers = 1;
  c.mlp_kinds = {MlpKind::kExperts};
  c.moe = {m.experts, m.top_k, m.expert_inter, m.shared_inter, m.normalise};
  return c;
}

template <class T>
std::vector<T> download(const gpu::DeviceBuffer& buffer, size_t count) {
  std::vector<T> host(count);
  HSRING_CUDA_CHECK(
      cudaMemcpy(host.data(), buffer.data(), count * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

class CudaMoeTest : public ::testing::TestWithParam<MoeCase> {};

TEST_P(CudaMoeTest, MatchesTheCpuMixture) {
  HSRING_REQUIRE_GPUS(1);
  const MoeCase m = GetParam();
  const ModelConfig c = moe_config(m);
  const ModelWeights w = bf16_weights(c, random_weights(c, 5));
  const uint32_t t = m.tokens, h = m.hidden, k = m.top_k;
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(size_t(t) * h);
  for (float& v : x) v = normal(rng);

  HSRING_CUDA_CHECK(cudaSetDevice(0));
  gpu::Stream stream = gpu::make_stream();
  DeviceWeights device = DeviceWeights::allocate(c, 0);
  device.upload(c, w, stream.get());
  ForwardActivations a;
  a.grow(c, t, 0);
  HSRING_CUDA_CHECK(cudaMemcpy(a.residual.data(), x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  Blas blas;
  blas.bind(stream.get());
  run_moe_mlp(blas, c, device.layer(0), a, t, stream.get());
  HSRING_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  const std::vector<float> got = download<float>(a.residual, x.size());
  const std::vector<ExpertChoice> got_choices = download<ExpertChoice>(a.expert_choices, t * k);

  // The CPU: the fp32 norm, the router's own choices, the mixture.
  const LayerWeights& l = w.layers[0];
  std::vector<float> normed(x.size()), logits(size_t(t) * m.experts), out(x.size());
  ops::rms_norm_forward(x.data(), l.post_attention_norm.data(), t, h, c.rms_norm_eps, normed.data(),
                        ops::Sums::kFloat);
  ops::linear_forward(normed.data(), t, h, l.moe.router.data(), m.experts, logits.data(),
                      ops::Sums::kFloat, 2);
  std::vector<ExpertChoice> want_choices(size_t(t) * k);
  for (uint32_t r = 0; r < t; ++r)
    route_token(logits.data() + size_t(r) * m.experts, m.experts, k, m.normalise,
                want_choices.data() + size_t(r) * k);
  MlpScratch scratch;
  moe_mlp(normed.data(), t, h, c.moe, l.moe, scratch, out.data(), 2);

  size_t same = 0;
  double worst_weight = 0;
  std::vector<uint32_t> load(m.experts, 0);
  for (size_t s = 0; s < want_choices.size(); ++s) {
    ++load[want_choices[s].expert];
    same += got_choices[s].expert == want_choices[s].expert;
    worst_weight =
        std::max(worst_weight, double(std::fabs(got_choices[s].weight - want_choices[s].weight)));
  }
  const auto idle = size_t(std::count(load.begin(), load.end(), 0u));
  const uint32_t busiest = *std::max_element(load.begin(), load.end());
  std::vector<float> delta(x.size());
  for (size_t i = 0; i < x.size(); ++i) delta[i] = got[i] - x[i];
  const double err = relative_error(delta, out);
  std::printf(
      "[   INFO   ] %s: %zu / %zu choices equal, worst weight difference %.2e, %zu experts "
      "idle, the busiest %u rows; relative error %.3e\n",
      m.name, same, want_choices.size(), worst_weight, idle, busiest, err);
  EXPECT_EQ(same, want_choices.size());
  EXPECT_LT(worst_weight, 1e-5);
  EXPECT_LT(err, 1e-2);
  // What each case is for: idle experts, an expert over several row tiles.
  if (std::string(m.name) == "few-tokens") {
    EXPECT_GT(idle, 0u);
  }
  if (std::string(m.name) == "long-groups") {
    EXPECT_GT(busiest, kExpertRowTile);
  }

  // The same bits again: nothing of the first run leaks into the second.
  HSRING_CUDA_CHECK(cudaMemcpy(a.residual.data(), x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  run_moe_mlp(blas, c, device.layer(0), a, t, stream.get());
  HSRING_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  EXPECT_EQ(download<float>(a.residual, x.size()), got);
}

// few-tokens: 6 slots over 16 experts, so most get none; long-groups: ~150 rows an expert
// (two and more tiles), widths off the GEMM's 32 / 128 tiles; wide: a shared expert and
// the 8-of-64 routing of the real shapes.
INSTANTIATE_TEST_SUITE_P(Shapes, CudaMoeTest,
                         ::testing::Values(MoeCase{"few-tokens", 3, 128, 16, 2, 48, 0, false},
                                           MoeCase{"long-groups", 300, 264, 4, 2, 200, 0, true},
                                           MoeCase{"wide", 200, 256, 64, 8, 64, 96, true}),
                         [](const auto& info) {
                           std::string name = info.param.name;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// Exact ties and a uniform row: the device picks what route_token picks on the host (the
// lower expert first), with the same weights.
TEST(CudaMoeRouteTest, TiesGoToTheLowerExpertAsOnTheHost) {
  HSRING_REQUIRE_GPUS(1);
  const uint32_t experts = 12, top_k = 4, rows = 40, stride = 16;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> level(-3, 3);
  std::vector<float> logits(size_t(rows) * stride, 0.0f);
  for (uint32_t r = 1; r < rows; ++r)  // row 0 stays uniform
    for (uint32_t e = 0; e < experts; ++e) logits[r * stride + e] = 0.5f * float(level(rng));
  HSRING_CUDA_CHECK(cudaSetDevice(0));
  gpu::DeviceBuffer device = gpu::DeviceBuffer::allocate(logits.size() * 4);
  gpu::DeviceBuffer choices = gpu::DeviceBuffer::allocate(rows * top_k * sizeof(ExpertChoice));
  for (const bool normalise : {false, true}) {
    HSRING_CUDA_CHECK(
        cudaMemcpy(device.data(), logits.data(), logits.size() * 4, cudaMemcpyHostToDevice));
    HSRING_CUDA_CHECK(launch_route(device.as<float>(), rows, stride, experts, top_k, normalise,
                                   choices.as<ExpertChoice>(), nullptr));
    HSRING_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<ExpertChoice> got = download<ExpertChoice>(choices, rows * top_k);
    std::vector<float> host = logits;
    for (uint32_t r = 0; r < rows; ++r) {
      ExpertChoice want[top_k];
      route_token(host.data() + r * stride, experts, top_k, normalise, want);
      for (uint32_t j = 0; j < top_k; ++j) {
        EXPECT_EQ(got[r * top_k + j].expert, want[j].expert) << "row " << r << " rank " << j;
        EXPECT_NEAR(got[r * top_k + j].weight, want[j].weight, 1e-6f) << "row " << r;
      }
    }
    EXPECT_EQ(got[0].expert, 0u);
    EXPECT_EQ(got[top_k - 1].expert, top_k - 1);
  }
}

}  // namespace
}  // namespace hsring
