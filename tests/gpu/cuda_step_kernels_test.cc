// Pieces of the drafter steps checked on their own: the cross-entropy kernel (one online
// pass for max, argmax and the sum of exponentials, then the gradient) against a host
// computation in double, the bf16 Gemm's held and bf16 operands against products that round
// their operands each time, and the kernels that write their output in bf16 for those holds
// (cross-entropy on bf16 logits, SwiGLU, AdamW) against launch_float_to_bf16 of their fp32
// output, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/error.h"
#include "device_arrays.h"
#include "gpu/cuda_check.h"
#include "gpu/cuda_handles.h"
#include "gpu/ops/bf16_convert.h"
#include "gpu/ops/gather_rows.h"
#include "gpu/ops/rms_norm.h"
#include "gpu/ops/swiglu.h"
#include "gpu_test_util.h"
#include "train/cuda_drafter_kernels.h"
#include "train/cuda_gemm.h"

namespace hsring::train {
namespace {

using gpu_test::next;
using gpu_test::to_device;
using gpu_test::to_host;
using gpu_test::uniform;
using gpu_test::uniform_values;

struct CrossEntropyCase {
  const char* name;
  uint32_t vocab;  // a multiple of 8 takes the eight-a-step path, others the scalar one
};

class CrossEntropyKernelTest : public ::testing::TestWithParam<CrossEntropyCase> {};

TEST_P(CrossEntropyKernelTest, LossArgmaxAndGradientMatchDoublePrecision) {
  HSRING_REQUIRE_GPUS(1);
  const uint32_t vocab = GetParam().vocab, rows = 37;
  uint64_t state = vocab;
  std::vector<float> logits(size_t(rows) * vocab), weight(rows);
  std::vector<int32_t> labels(rows);
  for (float& x : logits) x = uniform(state, 12.0f);
  for (uint32_t r = 0; r < rows; ++r) {
    labels[r] = r % 7 == 3 ? -100 : int32_t(next(state) % vocab);
    weight[r] = 0.25f + float(r) / rows;
  }
  // Ties: row 1's maximum twice (the first index must win), row 2's maximum is its label,
  // row 4's maximum is the row's last logit, row 5 holds -inf.
  float* row1 = logits.data() + vocab;
  row1[vocab - 2] = row1[5] = 40.0f;
  labels[2] = int32_t(vocab / 2);
  logits[2 * size_t(vocab) + vocab / 2] = 50.0f;
  logits[4 * size_t(vocab) + vocab - 1] = 45.0f;
  for (uint32_t i = 0; i < vocab; i += 3) logits[5 * size_t(vocab) + i] = -INFINITY;
  labels[5] = 1;  // a finite logit: the loss is finite

  gpu::DeviceBuffer d_logits = to_device(logits), d_labels = to_device(labels),
                    d_weight = to_device(weight);
  gpu::DeviceBuffer d_loss = gpu::DeviceBuffer::allocate(rows * sizeof(float));
  gpu::DeviceBuffer d_agreed = gpu::DeviceBuffer::allocate(rows * sizeof(int32_t));
  const float grad_scale = 0.5f;
  ASSERT_EQ(launch_cross_entropy(d_logits.as<float>(), d_labels.as<int32_t>(), rows, vocab,
                                 grad_scale, true, d_loss.as<float>(), d_agreed.as<int32_t>(),
                                 nullptr, d_weight.as<float>()),
            cudaSuccess);
  const std::vector<float> grads = to_host<float>(d_logits, logits.size());
  const std::vector<float> loss = to_host<float>(d_loss, rows);
  const std::vector<int32_t> agreed = to_host<int32_t>(d_agreed, rows);

  double worst_grad = 0;
  for (uint32_t r = 0; r < rows; ++r) {
    const float* x = logits.data() + size_t(r) * vocab;
    const float* g = grads.data() + size_t(r) * vocab;
    if (labels[r] < 0) {
      EXPECT_EQ(loss[r], 0.0f) << "row " << r;
      EXPECT_EQ(agreed[r], 0) << "row " << r;
      for (uint32_t i = 0; i < vocab; ++i) ASSERT_EQ(g[i], 0.0f) << "row " << r << " at " << i;
      continue;
    }
    uint32_t argmax = 0;
    for (uint32_t i = 1; i < vocab; ++i)
      if (x[i] > x[argmax]) argmax = i;
    double sum = 0;
    for (uint32_t i = 0; i < vocab; ++i) sum += std::exp(double(x[i]) - double(x[argmax]));
    const double lse = double(x[argmax]) + std::log(sum);
    EXPECT_NEAR(loss[r], lse - double(x[labels[r]]), 1e-4 * std::max(1.0, lse)) << "row " << r;
    EXPECT_EQ(agreed[r], argmax == uint32_t(labels[r]) ? 1 : 0) << "row " << r;
    const double scale = double(grad_scale) * weight[r];
    for (uint32_t i = 0; i < vocab; ++i) {
      const double want = scale * (std::exp(double(x[i]) - lse) - (i == uint32_t(labels[r])));
      worst_grad = std::max(worst_grad, std::abs(double(g[i]) - want));
    }
  }
  EXPECT_LT(worst_grad, 1e-5);
  EXPECT_EQ(agreed[2], 1);  // its label is its maximum
}

// The bits launch_float_to_bf16 makes of fp32 values on the device.
std::vector<uint16_t> rounded_on_device(const std::vector<float>& values) {
  gpu::DeviceBuffer in = to_device(values);
  gpu::DeviceBuffer out = gpu::DeviceBuffer::allocate(std::max<size_t>(1, values.size()) * 2);
  EXPECT_EQ(gpu::launch_float_to_bf16(in.as<float>(), values.size(), out.as<uint16_t>(), nullptr),
            cudaSuccess);
  return to_host<uint16_t>(out, values.size());
}

// bf16 logits (the bf16 head product's) take the same path as fp32 ones holding the same
// values: the same loss and argmax bit for bit, and the fp32 gradient rounded in place.
TEST_P(CrossEntropyKernelTest, Bf16LogitsGiveTheFp32ResultsWithTheGradientRounded) {
  HSRING_REQUIRE_GPUS(1);
  const uint32_t vocab = GetParam().vocab, rows = 23;
  uint64_t state = vocab + 1;
  std::vector<float> logits(size_t(rows) * vocab), weight(rows);
  std::vector<int32_t> labels(rows);
  for (float& x : logits) x = uniform(state, 12.0f);
  for (uint32_t r = 0; r < rows; ++r) {
    labels[r] = r % 5 == 2 ? -100 : int32_t(next(state) % vocab);
    weight[r] = 0.5f + float(r) / rows;
  }
  labels[1] = int32_t(vocab - 1);  // the row's last logit
  const std::vector<uint16_t> logits16 = gpu_test::float_to_bf16(logits);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = gpu_test::bf16_to_float(logits16[i]);
  gpu::DeviceBuffer fp32 = to_device(logits), bf16 = to_device(logits16),
                    d_labels = to_device(labels), d_weight = to_device(weight);
  gpu::DeviceBuffer loss = gpu::DeviceBuffer::allocate(rows * 4),
                    loss16 = gpu::DeviceBuffer::allocate(rows * 4),
                    agreed = gpu::DeviceBuffer::allocate(rows * 4),
                    agreed16 = gpu::DeviceBuffer::allocate(rows * 4);
  ASSERT_EQ(
      launch_cross_entropy(fp32.as<float>(), d_labels.as<int32_t>(), rows, vocab, 0.5f, true,
                           loss.as<float>(), agreed.as<int32_t>(), nullptr, d_weight.as<float>()),
      cudaSuccess);
  ASSERT_EQ(launch_cross_entropy(bf16.as<uint16_t>(), d_labels.as<int32_t>(), rows, vocab, 0.5f,
                                 true, loss16.as<float>(), agreed16.as<int32_t>(), nullptr,
                                 d_weight.as<float>()),
            cudaSuccess);
  EXPECT_EQ(to_host<float>(loss16, rows), to_host<float>(loss, rows));
  EXPECT_EQ(to_host<int32_t>(agreed16, rows), to_host<int32_t>(agreed, rows));
  const std::vector<uint16_t> grads16 = to_host<uint16_t>(bf16, logits.size());
  EXPECT_EQ(grads16, rounded_on_device(to_host<float>(fp32, logits.size())));
  // Ignored rows are zeroed, as in fp32.
  for (uint32_t i = 0; i < vocab; ++i) ASSERT_EQ(grads16[2 * size_t(vocab) + i], 0) << i;
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, CrossEntropyKernelTest,
                         ::testing::Values(CrossEntropyCase{"eight_a_step", 1000},
                                           CrossEntropyCase{"four_not_eight", 1004},
                                           CrossEntropyCase{"scalar", 1001},
                                           CrossEntropyCase{"small", 50}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Bf16OutputTest, SwigluWritesItsOutputsRoundedOrBoth) {
  HSRING_REQUIRE_GPUS(1);
  const size_t n = 1001;
  uint64_t state = 11;
  std::vector<float> gate(n), up(n), dout(n);
  for (size_t i = 0; i < n; ++i) {
    gate[i] = uniform(state, 6.0f);
    up[i] = uniform(state, 2.0f);
    dout[i] = uniform(state, 1.0f);
  }
  gpu::DeviceBuffer g = to_device(gate), u = to_device(up), d = to_device(dout);
  const auto floats = [n] { return gpu::DeviceBuffer::allocate(n * 4); };
  const auto halves = [n] { return gpu::DeviceBuffer::allocate(n * 2); };
  gpu::DeviceBuffer out = floats(), out16 = halves(), both = floats(), both16 = halves();
  ASSERT_EQ(gpu::launch_swiglu_forward(g.as<float>(), u.as<float>(), n, out.as<float>(), nullptr),
            cudaSuccess);
  ASSERT_EQ(gpu::launch_swiglu_forward(g.as<float>(), u.as<float>(), n, nullptr, nullptr,
                                       out16.as<uint16_t>()),
            cudaSuccess);
  ASSERT_EQ(gpu::launch_swiglu_forward(g.as<float>(), u.as<float>(), n, both.as<float>(), nullptr,
                                       both16.as<uint16_t>()),
            cudaSuccess);
  const std::vector<float> want = to_host<float>(out, n);
  EXPECT_EQ(to_host<uint16_t>(out16, n), rounded_on_device(want));
  EXPECT_EQ(to_host<float>(both, n), want);
  EXPECT_EQ(to_host<uint16_t>(both16, n), rounded_on_device(want));

  gpu::DeviceBuffer dg = floats(), du = floats(), dg16 = halves(), du16 = halves();
  ASSERT_EQ(gpu::launch_swiglu_backward(g.as<float>(), u.as<float>(), d.as<float>(), n,
                                        dg.as<float>(), du.as<float>(), nullptr),
            cudaSuccess);
  ASSERT_EQ(gpu::launch_swiglu_backward(g.as<float>(), u.as<float>(), d.as<float>(), n, nullptr,
                                        nullptr, nullptr, dg16.as<uint16_t>(), du16.as<uint16_t>()),
            cudaSuccess);
  EXPECT_EQ(to_host<uint16_t>(dg16, n), rounded_on_device(to_host<float>(dg, n)));
  EXPECT_EQ(to_host<uint16_t>(du16, n), rounded_on_device(to_host<float>(du, n)));
}

// bf16 inputs are read as the floats they hold: the results of those fp32 values, bit for
// bit, on the four-wide path (offset 0) and the one-at-a-time one (offset 1: misaligned),
// which agree with each other too.
TEST(Bf16OutputTest, SwigluReadsBf16InputsAsTheFloatsTheyHold) {
  HSRING_REQUIRE_GPUS(1);
  const size_t n = 1001;
  uint64_t state = 17;
  std::vector<float> values[3];
  std::vector<uint16_t> bits[3];
  const float scales[3] = {6.0f, 2.0f, 1.0f};  // gate, up, dout
  for (int k = 0; k < 3; ++k)
    for (size_t i = 0; i < n; ++i) {
      bits[k].push_back(gpu_test::float_to_bf16(uniform(state, scales[k])));
      values[k].push_back(gpu_test::bf16_to_float(bits[k].back()));
    }
  gpu::DeviceBuffer g = to_device(values[0]), u = to_device(values[1]), d = to_device(values[2]);
  gpu::DeviceBuffer g16 = to_device(bits[0]), u16 = to_device(bits[1]), d16 = to_device(bits[2]);
  // The four outputs (act, d_gate, d_up in fp32; act in bf16) from fp32 or bf16 inputs.
  struct Outputs {
    std::vector<float> act, dgate, dup;
    std::vector<uint16_t> act16;
    bool operator==(const Outputs&) const = default;
  };
  const auto run = [&](bool bf16_inputs, size_t offset) {
    const size_t m = n - offset;
    gpu::DeviceBuffer act = gpu::DeviceBuffer::allocate(m * 4),
                      act16 = gpu::DeviceBuffer::allocate(m * 2);
    gpu::DeviceBuffer dg = gpu::DeviceBuffer::allocate(m * 4),
                      du = gpu::DeviceBuffer::allocate(m * 4);
    if (bf16_inputs) {
      const uint16_t *gi = g16.as<uint16_t>() + offset, *ui = u16.as<uint16_t>() + offset,
                     *di = d16.as<uint16_t>() + offset;
      EXPECT_EQ(
          gpu::launch_swiglu_forward(gi, ui, m, act.as<float>(), nullptr, act16.as<uint16_t>()),
          cudaSuccess);
      EXPECT_EQ(gpu::launch_swiglu_backward(gi, ui, di, m, dg.as<float>(), du.as<float>(), nullptr),
                cudaSuccess);
    } else {
      const float *gi = g.as<float>() + offset, *ui = u.as<float>() + offset,
                  *di = d.as<float>() + offset;
      EXPECT_EQ(
          gpu::launch_swiglu_forward(gi, ui, m, act.as<float>(), nullptr, act16.as<uint16_t>()),
          cudaSuccess);
      EXPECT_EQ(gpu::launch_swiglu_backward(gi, ui, di, m, dg.as<float>(), du.as<float>(), nullptr),
                cudaSuccess);
    }
    return Outputs{to_host<float>(act, m), to_host<float>(dg, m), to_host<float>(du, m),
                   to_host<uint16_t>(act16, m)};
  };
  for (size_t offset : {0, 1}) EXPECT_EQ(run(true, offset), run(false, offset)) << offset;
  const Outputs aligned = run(true, 0), misaligned = run(true, 1);
  const auto tail = [](const auto& v) { return std::vector(v.begin() + 1, v.end()); };
  EXPECT_EQ(misaligned.act, tail(aligned.act));
  EXPECT_EQ(misaligned.dgate, tail(aligned.dgate));
  EXPECT_EQ(misaligned.dup, tail(aligned.dup));
  EXPECT_EQ(misaligned.act16, tail(aligned.act16));
  EXPECT_EQ(aligned.act16, rounded_on_device(aligned.act));
}

// The width norm (a block a row) and the head-sized one (a warp a row): the bf16 output is
// the fp32 one rounded, alone or beside it, and x_copy receives x.
TEST(Bf16OutputTest, RmsNormWritesItsOutputRoundedOrBoth) {
  HSRING_REQUIRE_GPUS(1);
  for (uint32_t dim : {128u, 4096u}) {
    const uint32_t rows = 37;
    uint64_t state = dim;
    const std::vector<float> x = uniform_values(size_t(rows) * dim, state, 3.0f);
    const std::vector<float> w = uniform_values(dim, state, 1.0f);
    gpu::DeviceBuffer dx = to_device(x), dw = to_device(w);
    const size_t count = x.size();
    gpu::DeviceBuffer y = gpu::DeviceBuffer::allocate(count * 4),
                      both = gpu::DeviceBuffer::allocate(count * 4);
    gpu::DeviceBuffer y16 = gpu::DeviceBuffer::allocate(count * 2),
                      both16 = gpu::DeviceBuffer::allocate(count * 2);
    ASSERT_EQ(gpu::launch_rms_norm_forward(dx.as<float>(), dw.as<float>(), rows, dim, 1e-6f,
                                           y.as<float>(), nullptr),
              cudaSuccess);
    ASSERT_EQ(gpu::launch_rms_norm_forward(dx.as<float>(), dw.as<float>(), rows, dim, 1e-6f,
                                           nullptr, nullptr, y16.as<uint16_t>()),
              cudaSuccess);
    gpu::DeviceBuffer copy = gpu::DeviceBuffer::allocate(count * 4);
    ASSERT_EQ(gpu::launch_rms_norm_forward(dx.as<float>(), dw.as<float>(), rows, dim, 1e-6f,
                                           both.as<float>(), nullptr, both16.as<uint16_t>(),
                                           copy.as<float>()),
              cudaSuccess);
    const std::vector<float> want = to_host<float>(y, count);
    EXPECT_EQ(to_host<float>(both, count), want) << dim;
    EXPECT_EQ(to_host<float>(copy, count), x) << dim << ": x_copy is x";
    EXPECT_EQ(to_host<uint16_t>(y16, count), rounded_on_device(want)) << dim;
    EXPECT_EQ(to_host<uint16_t>(both16, count), rounded_on_device(want)) << dim;
  }
}

// The width norms' one-pass backward against the maths in double on the host: dx written
// and added to, the weight's gradient added to from the blocks' partials; on the four-wide
// and the one-at-a-time paths, with more rows than blocks. Its bf16 dx is its fp32 dx
// rounded, alone or beside it, and the weight's gradient has the same bits every run.
TEST(RmsNormBackwardRowsTest, MatchesDoublePrecisionAndIsDeterministic) {
  HSRING_REQUIRE_GPUS(1);
  const float eps = 1e-6f;
  for (uint32_t dim : {64u, 1001u, 4096u}) {
    for (uint32_t rows : {3u, gpu::kRmsNormBackwardBlocks + 188}) {
      uint64_t state = dim * 31 + rows;
      const std::vector<float> x = uniform_values(size_t(rows) * dim, state, 2.0f);
      const std::vector<float> w = uniform_values(dim, state, 1.5f);
      const std::vector<float> dy = uniform_values(size_t(rows) * dim, state, 1.0f);
      const std::vector<float> dx0 = uniform_values(size_t(rows) * dim, state, 1.0f);
      const std::vector<float> dw0 = uniform_values(dim, state, 1.0f);
      const size_t count = x.size();
      gpu::DeviceBuffer d_x = to_device(x), d_w = to_device(w), d_dy = to_device(dy);
      gpu::DeviceBuffer partials =
          gpu::DeviceBuffer::allocate(size_t(gpu::kRmsNormBackwardBlocks) * dim * 4);
      struct Result {
        std::vector<float> dx, dw;
        std::vector<uint16_t> dx16;
      };
      const auto run = [&](bool accumulate, bool fp32, bool bf16) {
        gpu::DeviceBuffer dx = to_device(dx0), dw = to_device(dw0);
        gpu::DeviceBuffer dx16 = gpu::DeviceBuffer::allocate(count * 2);
        EXPECT_EQ(gpu::launch_rms_norm_backward_rows(
                      d_x.as<float>(), d_w.as<float>(), d_dy.as<float>(), rows, dim, eps,
                      fp32 ? dx.as<float>() : nullptr, accumulate, dw.as<float>(),
                      partials.as<float>(), nullptr, bf16 ? dx16.as<uint16_t>() : nullptr),
                  cudaSuccess);
        return Result{to_host<float>(dx, count), to_host<float>(dw, dim),
                      bf16 ? to_host<uint16_t>(dx16, count) : std::vector<uint16_t>{}};
      };
      for (bool accumulate : {false, true}) {
        const Result got = run(accumulate, true, true);
        std::vector<double> dw(dw0.begin(), dw0.end()), dw_scale(dim, 1.0);
        double worst_dx = 0;
        for (uint32_t r = 0; r < rows; ++r) {
          const size_t row = size_t(r) * dim;
          double squares = 0, projection = 0;
          for (uint32_t i = 0; i < dim; ++i) {
            squares += double(x[row + i]) * x[row + i];
            projection += double(w[i]) * dy[row + i] * x[row + i];
          }
          const double s = 1.0 / std::sqrt(squares / dim + eps);
          const double mean_projection = s * projection / dim;
          for (uint32_t i = 0; i < dim; ++i) {
            double want = s * (double(w[i]) * dy[row + i] - x[row + i] * s * mean_projection);
            if (accumulate) want += dx0[row + i];
            worst_dx = std::max(worst_dx, std::abs(got.dx[row + i] - want));
            dw[i] += double(dy[row + i]) * x[row + i] * s;
            dw_scale[i] += std::abs(double(dy[row + i]) * x[row + i] * s);
          }
        }
        EXPECT_LT(worst_dx, 2e-5) << dim << " x " << rows << " accumulate " << accumulate;
        for (uint32_t i = 0; i < dim; ++i)
          ASSERT_NEAR(got.dw[i], dw[i], 2e-6 * dw_scale[i]) << dim << " x " << rows << " at " << i;
        EXPECT_EQ(got.dx16, rounded_on_device(got.dx)) << dim << " x " << rows;
        const Result again = run(accumulate, true, false);
        EXPECT_EQ(again.dw, got.dw) << "the same bits every run";
        EXPECT_EQ(again.dx, got.dx);
      }
      EXPECT_EQ(run(false, false, true).dx16, run(false, true, true).dx16) << "bf16 dx alone";
    }
  }
  gpu::DeviceBuffer one = gpu::DeviceBuffer::allocate(4096);
  EXPECT_EQ(
      gpu::launch_rms_norm_backward_rows(one.as<float>(), one.as<float>(), one.as<float>(), 1, 4,
                                         eps, nullptr, true, one.as<float>(), one.as<float>(),
                                         nullptr, reinterpret_cast<uint16_t*>(one.as<float>())),
      cudaErrorInvalidValue)
      << "adding to dx needs the fp32 dx";
}

// A row's width a multiple of four (four at a time) or not (one at a time); more rows than
// the grid has (65535 on y).
class GatherRowsTest : public ::testing::TestWithParam<std::pair<uint32_t, uint32_t>> {};

TEST_P(GatherRowsTest, CopiesTheIndexedRowsRoundedOrNot) {
  HSRING_REQUIRE_GPUS(1);
  const uint32_t table_rows = 50, dim = GetParam().first, rows = GetParam().second;
  uint64_t state = 23;
  const std::vector<float> table = uniform_values(size_t(table_rows) * dim, state, 2.0f);
  std::vector<int32_t> index(rows);
  for (int32_t& i : index) i = int32_t(next(state) % table_rows);
  gpu::DeviceBuffer dt = to_device(table), di = to_device(index);
  gpu::DeviceBuffer y = gpu::DeviceBuffer::allocate(size_t(rows) * dim * 4);
  gpu::DeviceBuffer y16 = gpu::DeviceBuffer::allocate(size_t(rows) * dim * 2);
  ASSERT_EQ(gpu::launch_gather_rows(dt.as<float>(), di.as<int32_t>(), rows, dim, y.as<float>(),
                                    nullptr, y16.as<uint16_t>()),
            cudaSuccess);
  std::vector<float> want;
  for (int32_t i : index)
    want.insert(want.end(), table.begin() + size_t(i) * dim, table.begin() + size_t(i + 1) * dim);
  EXPECT_EQ(to_host<float>(y, want.size()), want);
  EXPECT_EQ(to_host<uint16_t>(y16, want.size()), rounded_on_device(want));

  // A negative index gives a row of zeros (a scatter back by the inverse index); a bf16
  // table gives its values exactly, in both outputs.
  for (size_t r = 0; r < rows; r += 3) index[r] = -1;
  const std::vector<uint16_t> table16 = gpu_test::float_to_bf16(table);
  gpu::DeviceBuffer dt16 = to_device(table16);
  di = to_device(index);
  ASSERT_EQ(gpu::launch_gather_rows(dt16.as<uint16_t>(), di.as<int32_t>(), rows, dim, y.as<float>(),
                                    nullptr, y16.as<uint16_t>()),
            cudaSuccess);
  std::vector<float> want_zeros;
  std::vector<uint16_t> want16;
  for (int32_t i : index)
    for (uint32_t k = 0; k < dim; ++k) {
      const uint16_t v = i < 0 ? uint16_t(0) : table16[size_t(i) * dim + k];
      want16.push_back(v);
      want_zeros.push_back(gpu_test::bf16_to_float(v));
    }
  EXPECT_EQ(to_host<float>(y, want_zeros.size()), want_zeros);
  EXPECT_EQ(to_host<uint16_t>(y16, want16.size()), want16);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GatherRowsTest,
                         ::testing::Values(std::pair{24u, 70u}, std::pair{7u, 70u},
                                           std::pair{8u, 70000u}));

// Also: the gradients in bf16 (FlatState::keep_bf16_gradients) update as the floats they
// hold, bit for bit.
TEST(Bf16OutputTest, AdamwWritesTheUpdatedWeightsRoundedAndUpdatesAsWithout) {
  HSRING_REQUIRE_GPUS(1);
  const size_t n = 1027;  // a tail past the last four-wide update
  uint64_t state = 13;
  std::vector<float> w(n + 1), g(n + 1), m(n + 1), v(n + 1);
  std::vector<uint16_t> g16(n + 1);
  for (size_t i = 0; i <= n; ++i) {
    w[i] = uniform(state, 1.0f);
    g16[i] = gpu_test::float_to_bf16(uniform(state, 0.1f));
    g[i] = gpu_test::bf16_to_float(g16[i]);
    m[i] = uniform(state, 0.01f);
    v[i] = std::abs(uniform(state, 1e-4f));
  }
  AdamWStep step;
  step.lr = 1e-3;
  step.beta1 = 0.9;
  step.beta2 = 0.95;
  step.eps = 1e-8;
  step.keep = 1 - 1e-3 * 0.1;
  step.clip = 0.5;
  step.correction1 = 1 - 0.9 * 0.9;
  step.correction2 = 1 - 0.95 * 0.95;
  // Offset 0 takes the four-wide path, offset 1 (misaligned) the scalar one.
  for (size_t offset : {size_t(0), size_t(1)}) {
    gpu::DeviceBuffer w1 = to_device(w), m1 = to_device(m), v1 = to_device(v);
    gpu::DeviceBuffer w2 = to_device(w), m2 = to_device(m), v2 = to_device(v), dg = to_device(g);
    gpu::DeviceBuffer w3 = to_device(w), m3 = to_device(m), v3 = to_device(v),
                      dg16 = to_device(g16);
    gpu::DeviceBuffer w16 = gpu::DeviceBuffer::allocate((n + 1) * 2);
    ASSERT_EQ(launch_adamw(w1.as<float>() + offset, dg.as<float>() + offset,
                           m1.as<float>() + offset, v1.as<float>() + offset, n, step, nullptr),
              cudaSuccess);
    ASSERT_EQ(
        launch_adamw(w2.as<float>() + offset, dg.as<float>() + offset, m2.as<float>() + offset,
                     v2.as<float>() + offset, n, step, nullptr, w16.as<uint16_t>() + offset),
        cudaSuccess);
    ASSERT_EQ(launch_adamw(w3.as<float>() + offset, dg16.as<uint16_t>() + offset,
                           m3.as<float>() + offset, v3.as<float>() + offset, n, step, nullptr),
              cudaSuccess);
    const std::vector<float> updated = to_host<float>(w1, n + 1);
    EXPECT_NE(updated, w) << "offset " << offset;
    for (const auto* other : {&w2, &w3}) EXPECT_EQ(to_host<float>(*other, n + 1), updated);
    for (const auto* other : {&m2, &m3})
      EXPECT_EQ(to_host<float>(*other, n + 1), to_host<float>(m1, n + 1)) << "offset " << offset;
    for (const auto* other : {&v2, &v3})
      EXPECT_EQ(to_host<float>(*other, n + 1), to_host<float>(v1, n + 1)) << "offset " << offset;
    const std::vector<uint16_t> rounded = rounded_on_device(updated);
    const std::vector<uint16_t> mirror = to_host<uint16_t>(w16, n + 1);
    for (size_t i = offset; i < offset + n; ++i)
      ASSERT_EQ(mirror[i], rounded[i]) << "offset " << offset << " at " << i;
  }
}

// y = x w^T through a Gemm, into host memory.
std::vector<float> forward(Gemm& gemm, const gpu::DeviceBuffer& x, size_t rows, size_t in,
                           const gpu::DeviceBuffer& w, size_t out) {
  gpu::DeviceBuffer y = gpu::DeviceBuffer::allocate(rows * out * sizeof(float));
  gemm.forward(x.as<float>(), rows, in, w.as<float>(), out, y.as<float>());
  HSRING_CUDA_CHECK(cudaDeviceSynchronize());
  return to_host<float>(y, rows * out);
}

TEST(GemmHoldTest, HeldOperandsGiveTheSameProductsUntilReleased) {
  HSRING_REQUIRE_GPUS(1);
  const size_t rows = 96, in = 80, out = 72;
  uint64_t state = 5;
  const std::vector<float> x = uniform_values(rows * in, state, 1.0f);
  const std::vector<float> w = uniform_values(out * in, state, 1.0f);
  gpu::DeviceBuffer dx = to_device(x), dw = to_device(w);
  gpu::Stream stream = gpu::make_stream();
  Gemm gemm(GemmPrecision::kBf16);
  gemm.bind(stream.get());
  const std::vector<float> plain = forward(gemm, dx, rows, in, dw, out);

  // Held (the weight, and the input inside a larger held range): the same rounding, once.
  gemm.hold_bf16(dw.as<float>(), w.size());
  gemm.hold_bf16(dx.as<float>(), x.size());
  EXPECT_EQ(forward(gemm, dx, rows, in, dw, out), plain);

  // A change to a held array is not seen until it is held again (the REQUIRES), then it is.
  std::vector<float> x2 = x;
  for (float& v : x2) v *= -2.0f;
  HSRING_CUDA_CHECK(
      cudaMemcpy(dx.data(), x2.data(), x2.size() * sizeof(float), cudaMemcpyHostToDevice));
  EXPECT_EQ(forward(gemm, dx, rows, in, dw, out), plain);
  gemm.hold_bf16(dx.as<float>(), x2.size());
  const std::vector<float> doubled = forward(gemm, dx, rows, in, dw, out);
  ASSERT_EQ(doubled.size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i) ASSERT_EQ(doubled[i], -2.0f * plain[i]) << i;

  // The caller's own bf16 of the same values: the products are the same.
  gpu::DeviceBuffer dx16 = to_device(gpu_test::float_to_bf16(x));
  gemm.hold_bf16(dx.as<float>(), x.size(), dx16.as<uint16_t>());
  EXPECT_EQ(forward(gemm, dx, rows, in, dw, out), plain);

  // Released: the products round the arrays as they are now (x2 again).
  gemm.release_holds();
  EXPECT_EQ(forward(gemm, dx, rows, in, dw, out), doubled);
}

TEST(GemmHoldTest, ABf16OutputIsTheFp32ProductRounded) {
  HSRING_REQUIRE_GPUS(1);
  const size_t rows = 96, in = 80, out = 72;
  uint64_t state = 9;
  const std::vector<float> x = uniform_values(rows * in, state, 1.0f);
  const std::vector<float> w = uniform_values(out * in, state, 1.0f);
  gpu::DeviceBuffer dx = to_device(x), dw = to_device(w);
  Gemm gemm(GemmPrecision::kBf16);
  const std::vector<float> want = forward(gemm, dx, rows, in, dw, out);
  gpu::DeviceBuffer y16 = gpu::DeviceBuffer::allocate(rows * out * sizeof(uint16_t));
  gemm.forward(dx.as<float>(), rows, in, dw.as<float>(), out, y16.as<uint16_t>());
  HSRING_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> got = to_host<uint16_t>(y16, rows * out);
  // cuBLAS may sum in another order for a bf16 output: within one bf16 ulp of the rounded
  // fp32 product, not necessarily its bits.
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_LE(std::abs(gpu_test::bf16_to_float(got[i]) - want[i]),
              std::ldexp(std::abs(want[i]), -7) + 1e-6f)
        << i;
  Gemm fp32(GemmPrecision::kFp32);
  EXPECT_THROW(fp32.forward(dx.as<float>(), rows, in, dw.as<float>(), out, y16.as<uint16_t>()),
               Error);
}

// The three products with bf16 operands read as they are give the products of the fp32
// arrays they round, bit for bit; the fp32 Gemm refuses them. A weight gradient that does
// not accumulate overwrites its output.
TEST(GemmOperandTest, Bf16OperandsGiveTheProductsOfTheArraysTheyRound) {
  HSRING_REQUIRE_GPUS(1);
  const size_t rows = 96, in = 80, out = 72;
  uint64_t state = 13;
  const std::vector<float> x = uniform_values(rows * in, state, 1.0f);
  const std::vector<float> w = uniform_values(out * in, state, 1.0f);
  const std::vector<float> dy = uniform_values(rows * out, state, 1.0f);
  const auto rounded = [](const std::vector<float>& v) {
    return to_device(gpu_test::float_to_bf16(v));
  };
  gpu::DeviceBuffer x32 = to_device(x), w32 = to_device(w), dy32 = to_device(dy);
  gpu::DeviceBuffer x16 = rounded(x), w16 = rounded(w), dy16 = rounded(dy);
  Gemm gemm(GemmPrecision::kBf16);
  // Each product once from the fp32 arrays and once from their bf16; dw is accumulated into
  // zeros, so both start alike.
  const auto products = [&](Operand xs, Operand ws, Operand dys) {
    gpu::DeviceBuffer y = gpu::DeviceBuffer::allocate(rows * out * sizeof(float));
    gpu::DeviceBuffer dx = gpu::DeviceBuffer::allocate(rows * in * sizeof(float));
    gpu::DeviceBuffer dw = to_device(std::vector<float>(out * in, 0.0f));
    gemm.forward(xs, rows, in, ws, out, y.as<float>());
    gemm.backward_input(dys, rows, out, ws, in, dx.as<float>());
    gemm.backward_weight(dys, rows, out, xs, in, dw.as<float>());
    HSRING_CUDA_CHECK(cudaDeviceSynchronize());
    return std::vector<std::vector<float>>{
        to_host<float>(y, rows * out), to_host<float>(dx, rows * in), to_host<float>(dw, out * in)};
  };
  const auto from_fp32 = products(x32.as<float>(), w32.as<float>(), dy32.as<float>());
  const auto from_bf16 = products(x16.as<uint16_t>(), w16.as<uint16_t>(), dy16.as<uint16_t>());
  const char* names[] = {"y", "dx", "dw"};
  for (size_t p = 0; p < 3; ++p) {
    ASSERT_EQ(from_bf16[p].size(), from_fp32[p].size());
    for (size_t i = 0; i < from_fp32[p].size(); ++i)
      ASSERT_EQ(from_bf16[p][i], from_fp32[p][i]) << names[p] << " at " << i;
  }
  // Mixed: a bf16 input with the fp32 weight.
  EXPECT_EQ(products(x16.as<uint16_t>(), w32.as<float>(), dy16.as<uint16_t>()), from_fp32);
  // Not accumulating, the weight gradient overwrites what dw held (NaNs here).
  gpu::DeviceBuffer dw = to_device(std::vector<float>(out * in, std::nanf("")));
  gemm.backward_weight(dy16.as<uint16_t>(), rows, out, x16.as<uint16_t>(), in, dw.as<float>(),
                       false);
  HSRING_CUDA_CHECK(cudaDeviceSynchronize());
  // (cuBLAS may take another kernel for a product that does not read its output: the same
  // sums, to rounding.)
  const std::vector<float> overwritten = to_host<float>(dw, out * in);
  for (size_t i = 0; i < overwritten.size(); ++i)
    ASSERT_NEAR(overwritten[i], from_fp32[2][i], 1e-5f * std::abs(from_fp32[2][i]) + 1e-6f) << i;

  Gemm fp32(GemmPrecision::kFp32);
  gpu::DeviceBuffer y = gpu::DeviceBuffer::allocate(rows * out * sizeof(float));
  EXPECT_THROW(fp32.forward(x16.as<uint16_t>(), rows, in, w32.as<float>(), out, y.as<float>()),
               Error);
  EXPECT_THROW(fp32.forward(x32.as<float>(), rows, in, w16.as<uint16_t>(), out, y.as<float>()),
               Error);
}

// A gradient read as a column range of a wider array (dy_stride) gives the product of the
// same values packed; in both precisions, and from a strided fp32 array on the bf16 Gemm,
// which rounds only what the product reads (the last row ends before the stride).
TEST(GemmOperandTest, AStridedGradientGivesThePackedOnesWeightGradient) {
  HSRING_REQUIRE_GPUS(1);
  const size_t rows = 40, in = 24, out = 16, stride = 56, col = 8;
  uint64_t state = 29;
  const std::vector<float> x = uniform_values(rows * in, state, 1.0f);
  const std::vector<float> dy = uniform_values(rows * out, state, 1.0f);
  // dy in columns [col, col + out) of [rows, stride], the rest NaN (read, they would show).
  std::vector<float> wide(rows * stride, std::nanf(""));
  for (size_t r = 0; r < rows; ++r)
    std::copy(dy.begin() + r * out, dy.begin() + (r + 1) * out, wide.begin() + r * stride + col);
  wide.resize((rows - 1) * stride + col + out);  // nothing past what the product reads
  for (const GemmPrecision precision : {GemmPrecision::kFp32, GemmPrecision::kBf16}) {
    Gemm gemm(precision);
    gpu::DeviceBuffer dx = to_device(x), packed = to_device(dy), strided = to_device(wide);
    gpu::DeviceBuffer want = gpu::DeviceBuffer::allocate(out * in * sizeof(float));
    gpu::DeviceBuffer got = gpu::DeviceBuffer::allocate(out * in * sizeof(float));
    gemm.backward_weight(packed.as<float>(), rows, out, dx.as<float>(), in, want.as<float>(),
                         false);
    gemm.backward_weight(strided.as<float>() + col, rows, out, dx.as<float>(), in, got.as<float>(),
                         false, stride);
    HSRING_CUDA_CHECK(cudaDeviceSynchronize());
    // (cuBLAS may pick another kernel for another stride: the same sums, to rounding.)
    const std::vector<float> g = to_host<float>(got, out * in), w = to_host<float>(want, out * in);
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_NEAR(g[i], w[i], 1e-5f * std::abs(w[i]) + 1e-6f)
          << (precision == GemmPrecision::kBf16 ? "bf16" : "fp32") << " at " << i;
    EXPECT_THROW(gemm.backward_weight(packed.as<float>(), rows, out, dx.as<float>(), in,
                                      got.as<float>(), false, out - 1),
                 Error);
  }
}

// A gradient rounded into a column range of a wider operand: each row's values are
// launch_float_to_bf16's, the other columns untouched; four a thread (columns and stride
// multiples of 4) or one (not).
TEST(Bf16OutputTest, RoundingIntoColumnsWritesOnlyThoseColumns) {
  HSRING_REQUIRE_GPUS(1);
  for (const auto [rows, cols, stride, col] :
       {std::array<size_t, 4>{33, 16, 40, 8}, {17, 5, 12, 3}, {9, 8, 8, 0}}) {
    uint64_t state = 31 + cols;
    const std::vector<float> in = uniform_values(rows * cols, state, 3.0f);
    const std::vector<uint16_t> want_rows = rounded_on_device(in);
    const std::vector<uint16_t> before(rows * stride, 0xABCDu);
    gpu::DeviceBuffer din = to_device(in), out = to_device(before);
    ASSERT_EQ(gpu::launch_float_to_bf16_rows(din.as<float>(), rows, cols, out.as<uint16_t>() + col,
                                             stride, nullptr),
              cudaSuccess);
    std::vector<uint16_t> want = before;
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) want[r * stride + col + c] = want_rows[r * cols + c];
    EXPECT_EQ(to_host<uint16_t>(out, want.size()), want) << cols << " columns, stride " << stride;
  }
  gpu::DeviceBuffer buffer = gpu::DeviceBuffer::allocate(64 * sizeof(float));
  EXPECT_EQ(
      gpu::launch_float_to_bf16_rows(buffer.as<float>(), 2, 8, buffer.as<uint16_t>(), 7, nullptr),
      cudaErrorInvalidValue);
}

// The sum of chosen rows: within float rounding of the double sum, the same bits on a
// second run, and from bf16 rows the sum of the floats they hold (the same bits as from
// those floats); a column range of a wider table is gathered by its stride.
TEST(SumRowsTest, SumsTheIndexedRowsInAFixedOrder) {
  HSRING_REQUIRE_GPUS(1);
  const uint32_t table_rows = 300, cols = 333, n = 250;  // n not a multiple of the chunks
  uint64_t state = 41;
  std::vector<float> table = uniform_values(size_t(table_rows) * cols, state, 1.0f);
  const std::vector<uint16_t> table16 = gpu_test::float_to_bf16(table);
  std::vector<float> widened(table16.size());
  for (size_t i = 0; i < widened.size(); ++i) widened[i] = gpu_test::bf16_to_float(table16[i]);
  std::vector<int32_t> index(n);
  for (int32_t& i : index) i = int32_t(next(state) % table_rows);
  gpu::DeviceBuffer dt = to_device(widened), dt16 = to_device(table16), di = to_device(index);
  gpu::DeviceBuffer partials = gpu::DeviceBuffer::allocate(kSumRowChunks * cols * sizeof(float));
  const auto sum = [&](const auto* x) {
    gpu::DeviceBuffer y = gpu::DeviceBuffer::allocate(cols * sizeof(float));
    gpu::DeviceBuffer y16 = gpu::DeviceBuffer::allocate(cols * sizeof(uint16_t));
    EXPECT_EQ(launch_sum_rows(x, di.as<int32_t>(), n, cols, partials.as<float>(), y.as<float>(),
                              y16.as<uint16_t>(), nullptr),
              cudaSuccess);
    return std::pair{to_host<float>(y, cols), to_host<uint16_t>(y16, cols)};
  };
  const auto [first, first16] = sum(dt.as<float>());
  for (uint32_t c = 0; c < cols; ++c) {
    double want = 0;
    for (int32_t i : index) want += widened[size_t(i) * cols + c];
    ASSERT_NEAR(first[c], want, 1e-5 * (std::abs(want) + 1.0)) << c;
  }
  EXPECT_EQ(first16, rounded_on_device(first));
  EXPECT_EQ(sum(dt.as<float>()).first, first);
  EXPECT_EQ(sum(dt16.as<uint16_t>()).first, first);

  // Columns [5, 5 + 7) of every indexed row.
  gpu::DeviceBuffer y = gpu::DeviceBuffer::allocate(size_t(n) * 7 * sizeof(float));
  ASSERT_EQ(gpu::launch_gather_rows(dt.as<float>() + 5, di.as<int32_t>(), n, 7, y.as<float>(),
                                    nullptr, nullptr, cols),
            cudaSuccess);
  std::vector<float> want;
  for (int32_t i : index)
    for (uint32_t k = 0; k < 7; ++k) want.push_back(widened[size_t(i) * cols + 5 + k]);
  EXPECT_EQ(to_host<float>(y, want.size()), want);
  EXPECT_EQ(gpu::launch_gather_rows(dt.as<float>(), di.as<int32_t>(), n, 7, y.as<float>(), nullptr,
                                    nullptr, 6),
            cudaErrorInvalidValue);
}

TEST(GemmHoldTest, Fp32GemmIgnoresHolds) {
  HSRING_REQUIRE_GPUS(1);
  const size_t rows = 8, in = 16, out = 8;
  std::vector<float> x(rows * in, 1.0f), w(out * in, 0.5f);
  gpu::DeviceBuffer dx = to_device(x), dw = to_device(w);
  Gemm gemm(GemmPrecision::kFp32);
  gemm.hold_bf16(dx.as<float>(), x.size());
  for (float& v : x) v = 3.0f;
  HSRING_CUDA_CHECK(
      cudaMemcpy(dx.data(), x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
  for (float v : forward(gemm, dx, rows, in, dw, out)) EXPECT_EQ(v, 3.0f * 0.5f * in);
}

// The sliding-window attention's kernels index in 32 bits and take head dims in multiples of
// 32 up to 256: a shape outside that (or with query heads not a multiple of the key/value
// heads) is refused before any launch, so no pointer is read.
TEST(SlidingWindowAttentionTest, ShapesTheKernelsCannotTakeAreRefused) {
  HSRING_REQUIRE_GPUS(1);
  const ops::AttentionShape fits{64, 4, 2, 64, 16};
  std::vector<ops::AttentionShape> refused(6, fits);
  refused[0].rows = size_t(UINT32_MAX) + 1;
  refused[1].heads = size_t(UINT32_MAX) + 1;
  refused[2].window = size_t(UINT32_MAX) + 1;
  refused[3].head_dim = 48;
  refused[4].kv_heads = 3;
  refused[5].kv_heads = 0;
  for (const ops::AttentionShape& shape : refused) {
    float out = 0;  // somewhere to write, so that only the shape can make the call refuse
    EXPECT_EQ(
        launch_attention_forward(nullptr, nullptr, nullptr, nullptr, shape, &out, &out, nullptr),
        cudaErrorInvalidValue)
        << shape.rows << " rows, " << shape.heads << "/" << shape.kv_heads << " heads x "
        << shape.head_dim << ", window " << shape.window;
    EXPECT_EQ(launch_attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                        nullptr, nullptr, shape, &out, &out, &out, &out, nullptr),
              cudaErrorInvalidValue);
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "nothing was launched";
}

}  // namespace
}  // namespace hsring::train
