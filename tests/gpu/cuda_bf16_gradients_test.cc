// Weight gradients in bf16 (train/cuda_flat_state.h keep_bf16_gradients): the bf16 weight
// product, the squared norm of bf16 values in double, and a FlatState whose matrices'
// gradients are in bf16, which updates, clips, scales and hands out its gradients exactly as
// one given their fp32 values. (AdamW on bf16 gradients: cuda_step_kernels_test.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "device_arrays.h"
#include "gpu/cuda_check.h"
#include "gpu/cuda_handles.h"
#include "gpu_test_util.h"
#include "train/cuda_drafter_kernels.h"
#include "train/cuda_flat_state.h"
#include "train/cuda_gemm.h"

namespace hsring::train {
namespace {

using gpu_test::to_device;
using gpu_test::to_host;
using gpu_test::uniform;

// n bf16 values near uniform ones in [-scale, scale), and the floats they hold.
std::vector<uint16_t> bf16_values(size_t n, uint64_t& state, float scale) {
  std::vector<uint16_t> out(n);
  for (uint16_t& v : out) v = gpu_test::float_to_bf16(uniform(state, scale));
  return out;
}
std::vector<float> widened(const std::vector<uint16_t>& values) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = gpu_test::bf16_to_float(values[i]);
  return out;
}

TEST(Bf16GradientsTest, SumOfSquaresIsTheDoubleSumInEitherPrecision) {
  HSRING_REQUIRE_GPUS(1);
  uint64_t state = 5;
  for (const size_t n : {size_t(1), size_t(7), size_t(4099), size_t(3u << 20) + 3}) {
    const std::vector<uint16_t> g16 = bf16_values(n, state, 2.0f);
    const std::vector<float> g32 = widened(g16);
    double want = 0;
    for (float v : g32) want += double(v) * double(v);
    const uint32_t blocks = sum_squares_blocks(n);
    ASSERT_GE(blocks, 1u);
    ASSERT_LE(blocks, kNormPartials);
    gpu::DeviceBuffer partials = gpu::DeviceBuffer::allocate(kNormPartials * sizeof(double));
    const gpu::DeviceBuffer d16 = to_device(g16), d32 = to_device(g32);
    for (const bool bf16 : {true, false}) {
      ASSERT_EQ(bf16 ? launch_sum_squares(d16.as<uint16_t>(), n, partials.as<double>(), nullptr)
                     : launch_sum_squares(d32.as<float>(), n, partials.as<double>(), nullptr),
                cudaSuccess);
      double got = 0;
      for (double p : to_host<double>(partials, blocks)) got += p;
      EXPECT_NEAR(got, want, 1e-12 * want) << n << " values, bf16 " << bf16;
    }
  }
}

TEST(Bf16GradientsTest, AWeightProductInBf16IsTheFp32OneRoundedAndAddsToWhatItHolds) {
  HSRING_REQUIRE_GPUS(1);
  const size_t rows = 48, in = 40, out = 24;
  uint64_t state = 31;
  const std::vector<float> x = gpu_test::uniform_values(rows * in, state, 1.0f);
  const std::vector<float> dy = gpu_test::uniform_values(rows * out, state, 1.0f);
  const std::vector<uint16_t> held = bf16_values(out * in, state, 4.0f);
  Gemm gemm(GemmPrecision::kBf16);
  const gpu::DeviceBuffer dx = to_device(x), ddy = to_device(dy);
  gpu::DeviceBuffer fp32 = gpu::DeviceBuffer::allocate(out * in * sizeof(float));
  gpu::DeviceBuffer written = gpu::DeviceBuffer::allocate(out * in * 2), added = to_device(held);
  gemm.backward_weight(ddy.as<float>(), rows, out, dx.as<float>(), in, fp32.as<float>(), false);
  gemm.backward_weight(ddy.as<float>(), rows, out, dx.as<float>(), in, written.as<uint16_t>(),
                       false);
  gemm.backward_weight(ddy.as<float>(), rows, out, dx.as<float>(), in, added.as<uint16_t>(), true);
  HSRING_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> want = to_host<float>(fp32, out * in);
  const std::vector<float> got = widened(to_host<uint16_t>(written, out * in));
  const std::vector<float> sum = widened(to_host<uint16_t>(added, out * in));
  for (size_t i = 0; i < want.size(); ++i) {
    // Rounded once to 8 significant bits: within half a unit in the last place (and the
    // fp32 sums' own rounding: another kernel may add in another order).
    ASSERT_LE(std::abs(got[i] - want[i]), std::ldexp(std::abs(want[i]), -8) + 1e-5f) << i;
    // Added to a bf16 value, the product may be rounded before the sum is (as autocast's
    // two bf16 gradients of one weight are summed in bf16): half a unit of each.
    const float total = want[i] + gpu_test::bf16_to_float(held[i]);
    ASSERT_LE(std::abs(sum[i] - total), std::ldexp(std::abs(want[i]) + std::abs(total), -8) + 1e-5f)
        << i;
  }
  EXPECT_THROW(Gemm(GemmPrecision::kFp32)
                   .backward_weight(ddy.as<float>(), rows, out, dx.as<float>(), in,
                                    written.as<uint16_t>(), false),
               std::exception);
}

// Two matrices with a vector between them, and a gap the alignment leaves.
ParamLayout small_layout() {
  ParamLayout layout;
  layout.tensors = {{"a.weight", {24, 33}, 0, 24 * 33, true},
                    {"norm.weight", {40}, 800, 40, false},
                    {"b.weight", {17, 9}, 848, 17 * 9, true}};
  layout.total = 1001;
  return layout;
}

TEST(Bf16GradientsTest, AStateWithBf16MatrixGradientsActsAsWithTheirFp32Values) {
  HSRING_REQUIRE_GPUS(1);
  const ParamLayout layout = small_layout();
  uint64_t state = 77;
  std::vector<float> initial(layout.total, 0.0f);
  for (const ParamInfo& t : layout.tensors)
    for (size_t i = t.offset; i < t.offset + t.size; ++i) initial[i] = uniform(state, 0.5f);
  AdamWOptions options;
  options.schedule = {1e-3, 1e-4, 0, 100};
  for (const double max_norm : {1e9, 0.05}) {  // not clipped, then clipped
    options.max_grad_norm = max_norm;
    gpu::Stream stream = gpu::make_stream();
    FlatState mixed(layout, options, initial, stream.get());
    FlatState plain(layout, options, initial, stream.get());
    mixed.keep_bf16_gradients();
    std::vector<float> want(layout.total, 0.0f);
    for (const ParamInfo& t : layout.tensors) {
      if (t.shape.size() == 2) {
        const std::vector<uint16_t> g = bf16_values(t.size, state, 0.2f);
        HSRING_CUDA_CHECK(
            cudaMemcpy(mixed.grads_bf16(t.offset), g.data(), t.size * 2, cudaMemcpyHostToDevice));
        for (size_t i = 0; i < t.size; ++i) want[t.offset + i] = gpu_test::bf16_to_float(g[i]);
      } else {
        for (size_t i = 0; i < t.size; ++i) want[t.offset + i] = uniform(state, 0.2f);
        HSRING_CUDA_CHECK(cudaMemcpy(mixed.grads(t.offset), want.data() + t.offset, t.size * 4,
                                     cudaMemcpyHostToDevice));
      }
    }
    // Stale values where the matrices' fp32 gradients would be: never read.
    const std::vector<float> stale(layout.tensors[0].size, 1e3f);
    HSRING_CUDA_CHECK(
        cudaMemcpy(mixed.grads(0), stale.data(), stale.size() * 4, cudaMemcpyHostToDevice));
    mixed.matrix_gradients_in_bf16();
    HSRING_CUDA_CHECK(
        cudaMemcpy(plain.grads(), want.data(), want.size() * 4, cudaMemcpyHostToDevice));

    const UpdateStats a = mixed.apply_gradients(), b = plain.apply_gradients();
    EXPECT_NEAR(a.grad_norm, b.grad_norm, 1e-12 * b.grad_norm) << "max norm " << max_norm;
    EXPECT_EQ(a.clipped, b.clipped);
    EXPECT_EQ(a.clipped, max_norm < 1) << "the clipped case must clip";
    EXPECT_EQ(mixed.download_params(), plain.download_params()) << "max norm " << max_norm;
    // Widened for whatever reads them as one array, then scaled as the fp32 ones are.
    EXPECT_EQ(mixed.download_gradients(), want);
    mixed.matrix_gradients_in_bf16();  // the bf16 array still holds the same values
    mixed.scale_gradients(0.25f);
    plain.scale_gradients(0.25f);
    EXPECT_EQ(mixed.download_gradients(), plain.download_gradients());
  }
}

TEST(Bf16GradientsTest, Bf16GradientsNeedTheirArray) {
  HSRING_REQUIRE_GPUS(1);
  const ParamLayout layout = small_layout();
  gpu::Stream stream = gpu::make_stream();
  FlatState state(layout, AdamWOptions{}, std::vector<float>(layout.total, 0.0f), stream.get());
  EXPECT_THROW(state.matrix_gradients_in_bf16(), std::exception);
}

}  // namespace
}  // namespace hsring::train
