// The fused QK-norm + RoPE kernels (train/cuda_qk_norm_rope.h) against the passes they
// replace (gpu/ops/rms_norm.h, gpu/ops/rope.h): launch_rms_norm_forward then launch_rope_apply
// forward; launch_rope_apply(inverse) then launch_rms_norm_backward_rows backward;
// launch_float_to_bf16 for the bf16 dx.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "device_arrays.h"
#include "gpu/cuda_check.h"
#include "gpu/cuda_handles.h"
#include "gpu/ops/bf16_convert.h"
#include "gpu/ops/rms_norm.h"
#include "gpu/ops/rope.h"
#include "gpu_test_util.h"
#include "train/cuda_drafter_kernels.h"
#include "train/cuda_qk_norm_rope.h"

namespace hsring::train {
namespace {

constexpr float kEps = 1e-6f;

using gpu_test::next;
using gpu_test::to_device;
using gpu_test::to_host;
using gpu_test::uniform;

// The largest |got - want| / max(1, |want|) (a NaN counts as failing) is at most `tolerance`.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tolerance,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double error =
        std::abs(double(got[i]) - double(want[i])) / std::max(1.0, std::abs(double(want[i])));
    if (std::isnan(error) || error > worst) {
      worst = error;
      at = i;
      if (std::isnan(error)) break;
    }
  }
  EXPECT_LE(worst, tolerance) << what << " at " << at << ": " << got[at] << ", want " << want[at];
}

struct Shape {
  const char* name;
  uint32_t rows, heads, head_dim;
  size_t values() const { return size_t(rows) * heads * head_dim; }
  uint32_t norm_rows() const { return rows * heads; }
};

// Random x (scale 2), w (1 +- 0.5), dy, and the cos/sin of real RoPE angles
// (position * theta^(-2i / head_dim)) at random positions.
struct Inputs {
  std::vector<float> x, w, dy, cos, sin;
};

Inputs make_inputs(const Shape& shape) {
  uint64_t state = 1000003u * shape.head_dim + 31u * shape.heads + shape.rows;
  Inputs in;
  in.x.resize(shape.values());
  in.dy.resize(shape.values());
  in.w.resize(shape.head_dim);
  for (float& v : in.x) v = uniform(state, 2.0f);
  for (float& v : in.dy) v = uniform(state, 1.0f);
  for (float& v : in.w) v = 1.0f + uniform(state, 0.5f);
  const uint32_t half = shape.head_dim / 2;
  const double theta = 1e6;  // Qwen3's rope_theta
  in.cos.resize(size_t(shape.rows) * half);
  in.sin.resize(size_t(shape.rows) * half);
  for (uint32_t r = 0; r < shape.rows; ++r) {
    const double position = double(next(state) % 8192);
    for (uint32_t i = 0; i < half; ++i) {
      const double angle = position * std::pow(theta, -2.0 * i / shape.head_dim);
      in.cos[size_t(r) * half + i] = float(std::cos(angle));
      in.sin[size_t(r) * half + i] = float(std::sin(angle));
    }
  }
  return in;
}

// The inputs on the device.
struct DeviceInputs {
  explicit DeviceInputs(const Inputs& in)
      : x(to_device(in.x)),
        w(to_device(in.w)),
        dy(to_device(in.dy)),
        cos(to_device(in.cos)),
        sin(to_device(in.sin)) {}
  gpu::DeviceBuffer x, w, dy, cos, sin;
};

gpu::DeviceBuffer floats(size_t count) {
  return gpu::DeviceBuffer::allocate(std::max<size_t>(1, count) * sizeof(float));
}

class QkNormRopeTest : public ::testing::TestWithParam<Shape> {};

TEST_P(QkNormRopeTest, ForwardEqualsNormThenRope) {
  HSRING_REQUIRE_GPUS(1);
  const Shape shape = GetParam();
  const Inputs in = make_inputs(shape);
  const DeviceInputs d(in);

  gpu::DeviceBuffer want = floats(shape.values());
  ASSERT_EQ(gpu::launch_rms_norm_forward(d.x.as<float>(), d.w.as<float>(), shape.norm_rows(),
                                         shape.head_dim, kEps, want.as<float>(), nullptr),
            cudaSuccess);
  ASSERT_EQ(gpu::launch_rope_apply(want.as<float>(), shape.rows, shape.heads, shape.head_dim,
                                   d.cos.as<float>(), d.sin.as<float>(), false, nullptr),
            cudaSuccess);

  gpu::DeviceBuffer y = floats(shape.values());
  ASSERT_EQ(launch_qk_norm_rope_forward(d.x.as<float>(), d.w.as<float>(), shape.rows, shape.heads,
                                        shape.head_dim, kEps, d.cos.as<float>(), d.sin.as<float>(),
                                        y.as<float>(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_close(to_host<float>(y, shape.values()), to_host<float>(want, shape.values()), 1e-5, "y");
}

TEST_P(QkNormRopeTest, BackwardEqualsRopeInverseThenNormBackward) {
  HSRING_REQUIRE_GPUS(1);
  const Shape shape = GetParam();
  const Inputs in = make_inputs(shape);
  const DeviceInputs d(in);
  // A nonzero start: the weight's gradient is added to it.
  uint64_t state = 99;
  std::vector<float> dweight0(shape.head_dim);
  for (float& v : dweight0) v = 3.0f + uniform(state, 2.0f);

  // The separate passes, on a copy of dy.
  gpu::DeviceBuffer g = to_device(in.dy), want_dx = floats(shape.values()),
                    partials = floats(size_t(gpu::kRmsNormBackwardBlocks) * shape.head_dim),
                    want_dweight = to_device(dweight0);
  ASSERT_EQ(gpu::launch_rope_apply(g.as<float>(), shape.rows, shape.heads, shape.head_dim,
                                   d.cos.as<float>(), d.sin.as<float>(), true, nullptr),
            cudaSuccess);
  ASSERT_EQ(gpu::launch_rms_norm_backward_rows(d.x.as<float>(), d.w.as<float>(), g.as<float>(),
                                               shape.norm_rows(), shape.head_dim, kEps,
                                               want_dx.as<float>(), false, want_dweight.as<float>(),
                                               partials.as<float>(), nullptr),
            cudaSuccess);

  gpu::DeviceBuffer dx = floats(shape.values()), dweight = to_device(dweight0);
  ASSERT_EQ(launch_qk_norm_rope_backward(d.x.as<float>(), d.w.as<float>(), d.dy.as<float>(),
                                         shape.rows, shape.heads, shape.head_dim, kEps,
                                         d.cos.as<float>(), d.sin.as<float>(), dx.as<float>(),
                                         nullptr, dweight.as<float>(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  expect_close(to_host<float>(dx, shape.values()), to_host<float>(want_dx, shape.values()), 1e-5,
               "dx");
  EXPECT_EQ(to_host<float>(d.dy, shape.values()), in.dy) << "dy changed";
  // The fused kernel adds float atomics in an order that varies, so the error grows with
  // the partial sums, not with a column's total (which may cancel to near 0): relative to
  // the largest column.
  const std::vector<float> want = to_host<float>(want_dweight, shape.head_dim);
  float largest = 1;
  for (float v : want) largest = std::max(largest, std::abs(v));
  const std::vector<float> got = to_host<float>(dweight, shape.head_dim);
  for (uint32_t i = 0; i < shape.head_dim; ++i)
    EXPECT_NEAR(got[i], want[i], 1e-4 * largest) << "dweight[" << i << "]";
}

TEST_P(QkNormRopeTest, Bf16GradientHasTheBitsOfTheRoundedFp32One) {
  HSRING_REQUIRE_GPUS(1);
  const Shape shape = GetParam();
  const Inputs in = make_inputs(shape);
  const DeviceInputs d(in);
  const size_t n = shape.values();
  auto backward = [&](float* dx, uint16_t* dx_bf16) {
    gpu::DeviceBuffer dweight = to_device(std::vector<float>(shape.head_dim, 0.0f));
    return launch_qk_norm_rope_backward(
        d.x.as<float>(), d.w.as<float>(), d.dy.as<float>(), shape.rows, shape.heads, shape.head_dim,
        kEps, d.cos.as<float>(), d.sin.as<float>(), dx, dx_bf16, dweight.as<float>(), nullptr);
  };
  gpu::DeviceBuffer dx = floats(n);
  gpu::DeviceBuffer both = gpu::DeviceBuffer::allocate(std::max<size_t>(1, n) * sizeof(uint16_t));
  gpu::DeviceBuffer alone = gpu::DeviceBuffer::allocate(std::max<size_t>(1, n) * sizeof(uint16_t));
  gpu::DeviceBuffer rounded =
      gpu::DeviceBuffer::allocate(std::max<size_t>(1, n) * sizeof(uint16_t));
  ASSERT_EQ(backward(dx.as<float>(), both.as<uint16_t>()), cudaSuccess);
  ASSERT_EQ(backward(nullptr, alone.as<uint16_t>()), cudaSuccess);
  ASSERT_EQ(gpu::launch_float_to_bf16(dx.as<float>(), n, rounded.as<uint16_t>(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const std::vector<uint16_t> want = to_host<uint16_t>(rounded, n);
  const std::vector<uint16_t> got_both = to_host<uint16_t>(both, n);
  const std::vector<uint16_t> got_alone = to_host<uint16_t>(alone, n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(got_both[i], want[i]) << "both given, at " << i;
    ASSERT_EQ(got_alone[i], got_both[i]) << "bf16 alone, at " << i;
  }
}

// dx written into a column range of a wider array (dx_stride): each row's values are the
// packed dx's, fp32 and bf16, and the other columns are untouched.
TEST_P(QkNormRopeTest, StridedGradientIsThePackedOneInItsColumns) {
  HSRING_REQUIRE_GPUS(1);
  const Shape shape = GetParam();
  const Inputs in = make_inputs(shape);
  const DeviceInputs d(in);
  const size_t n = shape.values(), width = size_t(shape.heads) * shape.head_dim;
  const size_t col = shape.head_dim / 2 + 1, stride = width + shape.head_dim + 3;
  auto backward = [&](float* dx, uint16_t* dx_bf16, uint32_t dx_stride) {
    gpu::DeviceBuffer dweight = to_device(std::vector<float>(shape.head_dim, 0.0f));
    return launch_qk_norm_rope_backward(d.x.as<float>(), d.w.as<float>(), d.dy.as<float>(),
                                        shape.rows, shape.heads, shape.head_dim, kEps,
                                        d.cos.as<float>(), d.sin.as<float>(), dx, dx_bf16,
                                        dweight.as<float>(), nullptr, dx_stride);
  };
  gpu::DeviceBuffer dx = floats(n);
  gpu::DeviceBuffer dx16 = gpu::DeviceBuffer::allocate(std::max<size_t>(1, n) * sizeof(uint16_t));
  ASSERT_EQ(backward(dx.as<float>(), dx16.as<uint16_t>(), 0), cudaSuccess);
  const std::vector<float> before(shape.rows * stride, -7.0f);
  const std::vector<uint16_t> before16(shape.rows * stride, 0xABCDu);
  gpu::DeviceBuffer wide = to_device(before), wide16 = to_device(before16);
  ASSERT_EQ(backward(wide.as<float>() + col, wide16.as<uint16_t>() + col, uint32_t(stride)),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const std::vector<float> packed = to_host<float>(dx, n);
  const std::vector<uint16_t> packed16 = to_host<uint16_t>(dx16, n);
  std::vector<float> want = before;
  std::vector<uint16_t> want16 = before16;
  for (size_t r = 0; r < shape.rows; ++r)
    for (size_t i = 0; i < width; ++i) {
      want[r * stride + col + i] = packed[r * width + i];
      want16[r * stride + col + i] = packed16[r * width + i];
    }
  EXPECT_EQ(to_host<float>(wide, want.size()), want);
  EXPECT_EQ(to_host<uint16_t>(wide16, want16.size()), want16);
  EXPECT_EQ(backward(dx.as<float>(), nullptr, uint32_t(width - 1)), cudaErrorInvalidValue);
}

INSTANTIATE_TEST_SUITE_P(Shapes, QkNormRopeTest,
                         ::testing::Values(Shape{"qwen3_queries", 300, 32, 128},
                                           Shape{"dim64", 77, 8, 64}, Shape{"dim32", 5, 4, 32},
                                           Shape{"dim256", 33, 2, 256}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_P(QkNormRopeTest, Bf16OutputHasTheBitsOfTheRoundedFp32One) {
  HSRING_REQUIRE_GPUS(1);
  const Shape shape = GetParam();
  const Inputs in = make_inputs(shape);
  const DeviceInputs d(in);
  const size_t n = shape.values();
  auto forward = [&](float* y, uint16_t* y_bf16) {
    return launch_qk_norm_rope_forward(d.x.as<float>(), d.w.as<float>(), shape.rows, shape.heads,
                                       shape.head_dim, kEps, d.cos.as<float>(), d.sin.as<float>(),
                                       y, nullptr, y_bf16);
  };
  const auto halves = [n] {
    return gpu::DeviceBuffer::allocate(std::max<size_t>(1, n) * sizeof(uint16_t));
  };
  gpu::DeviceBuffer y = floats(n), both = halves(), alone = halves(), rounded = halves();
  ASSERT_EQ(forward(y.as<float>(), both.as<uint16_t>()), cudaSuccess);
  ASSERT_EQ(forward(nullptr, alone.as<uint16_t>()), cudaSuccess);
  ASSERT_EQ(gpu::launch_float_to_bf16(y.as<float>(), n, rounded.as<uint16_t>(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint16_t> want = to_host<uint16_t>(rounded, n);
  EXPECT_EQ(to_host<uint16_t>(both, n), want);
  EXPECT_EQ(to_host<uint16_t>(alone, n), want);
  EXPECT_EQ(forward(nullptr, nullptr), cudaErrorInvalidValue);
}

// x in bf16 (as the bf16 projections write it) is read as the floats it holds: the same
// outputs, bit for bit, as fp32 x holding those floats, forward and back (dweight's float
// atomics vary in order, so it is compared within their rounding).
TEST_P(QkNormRopeTest, Bf16InputGivesTheResultsOfItsFloats) {
  HSRING_REQUIRE_GPUS(1);
  const Shape shape = GetParam();
  Inputs in = make_inputs(shape);
  const std::vector<uint16_t> x16 = gpu_test::float_to_bf16(in.x);
  for (size_t i = 0; i < x16.size(); ++i) in.x[i] = gpu_test::bf16_to_float(x16[i]);
  const DeviceInputs d(in);
  gpu::DeviceBuffer d_x16 = to_device(x16);
  const size_t n = shape.values();
  struct Outputs {
    std::vector<float> y, dx, dweight;
  };
  const auto run = [&](const auto* x) {
    gpu::DeviceBuffer y = floats(n), dx = floats(n);
    gpu::DeviceBuffer dweight = to_device(std::vector<float>(shape.head_dim, 0.0f));
    EXPECT_EQ(launch_qk_norm_rope_forward(x, d.w.as<float>(), shape.rows, shape.heads,
                                          shape.head_dim, kEps, d.cos.as<float>(),
                                          d.sin.as<float>(), y.as<float>(), nullptr),
              cudaSuccess);
    EXPECT_EQ(
        launch_qk_norm_rope_backward(x, d.w.as<float>(), d.dy.as<float>(), shape.rows, shape.heads,
                                     shape.head_dim, kEps, d.cos.as<float>(), d.sin.as<float>(),
                                     dx.as<float>(), nullptr, dweight.as<float>(), nullptr),
        cudaSuccess);
    return Outputs{to_host<float>(y, n), to_host<float>(dx, n),
                   to_host<float>(dweight, shape.head_dim)};
  };
  const Outputs want = run(d.x.as<float>());
  const Outputs got = run(d_x16.as<uint16_t>());
  EXPECT_EQ(got.y, want.y);
  EXPECT_EQ(got.dx, want.dx);
  float largest = 1;
  for (float v : want.dweight) largest = std::max(largest, std::abs(v));
  for (uint32_t i = 0; i < shape.head_dim; ++i)
    EXPECT_NEAR(got.dweight[i], want.dweight[i], 1e-5 * largest) << "dweight[" << i << "]";
}

TEST(QkNormRopeEdgeTest, NoRowsLaunchesNothing) {
  HSRING_REQUIRE_GPUS(1);
  const uint32_t heads = 4, head_dim = 128, values = heads * head_dim;
  const std::vector<float> ones(values, 1.0f), sentinel(values, 7.0f);
  gpu::DeviceBuffer x = to_device(ones), w = to_device(ones), dy = to_device(ones),
                    cos = to_device(ones), sin = to_device(ones), y = to_device(sentinel),
                    dx = to_device(sentinel), dweight = to_device(sentinel);
  gpu::DeviceBuffer dx_bf16 = to_device(std::vector<uint16_t>(values, 0x1234));

  ASSERT_EQ(launch_qk_norm_rope_forward(x.as<float>(), w.as<float>(), 0, heads, head_dim, kEps,
                                        cos.as<float>(), sin.as<float>(), y.as<float>(), nullptr),
            cudaSuccess);
  ASSERT_EQ(
      launch_qk_norm_rope_backward(x.as<float>(), w.as<float>(), dy.as<float>(), 0, heads, head_dim,
                                   kEps, cos.as<float>(), sin.as<float>(), dx.as<float>(),
                                   dx_bf16.as<uint16_t>(), dweight.as<float>(), nullptr),
      cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(to_host<float>(y, values), sentinel);
  EXPECT_EQ(to_host<float>(dx, values), sentinel);
  EXPECT_EQ(to_host<float>(dweight, head_dim), std::vector<float>(head_dim, 7.0f));
  EXPECT_EQ(to_host<uint16_t>(dx_bf16, values), std::vector<uint16_t>(values, 0x1234));
}

TEST(QkNormRopeEdgeTest, RefusesWhatItCannotCompute) {
  HSRING_REQUIRE_GPUS(1);
  gpu::DeviceBuffer buffer = floats(1024);
  float* p = buffer.as<float>();
  // head_dim odd or past 256; a backward with no dx to write. None launches anything.
  EXPECT_EQ(launch_qk_norm_rope_forward(p, p, 1, 1, 63, kEps, p, p, p, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(launch_qk_norm_rope_forward(p, p, 1, 1, 258, kEps, p, p, p, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(
      launch_qk_norm_rope_backward(p, p, p, 1, 1, 64, kEps, p, p, nullptr, nullptr, p, nullptr),
      cudaErrorInvalidValue);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace hsring::train
