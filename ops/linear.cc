#include "ops/linear.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "common/contract.h"
#include "common/parallel.h"
#include "ops/dot.h"

namespace hsring::ops {

namespace {

using lanes::Four;
using lanes::load4;
using lanes::load4f;
using lanes::sum_lanes;
using lanes::Vec2d;
using lanes::Vec4f;

// Four fp32 dot products sharing x: its loads are reused and 8 independent accumulators
// hide the add latency. Each one's arithmetic is exactly dot()'s.
void dot4_float(const float* x, const float* const w[4], size_t n, double out[4]) {
  Vec4f lo0 = {}, hi0 = {}, lo1 = {}, hi1 = {}, lo2 = {}, hi2 = {}, lo3 = {}, hi3 = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const Vec4f xl = load4f(x + i);
    const Vec4f xh = load4f(x + i + 4);
    lo0 += xl * load4f(w[0] + i);
    hi0 += xh * load4f(w[0] + i + 4);
    lo1 += xl * load4f(w[1] + i);
    hi1 += xh * load4f(w[1] + i + 4);
    lo2 += xl * load4f(w[2] + i);
    hi2 += xh * load4f(w[2] + i + 4);
    lo3 += xl * load4f(w[3] + i);
    hi3 += xh * load4f(w[3] + i + 4);
  }
  out[0] = lanes::finish(lo0, hi0, x, w[0], i, n);
  out[1] = lanes::finish(lo1, hi1, x, w[1], i, n);
  out[2] = lanes::finish(lo2, hi2, x, w[2], i, n);
  out[3] = lanes::finish(lo3, hi3, x, w[3], i, n);
}

// Four double dot products sharing a: a is widened once for all four. Each output has four
// lanes, reduced in a fixed tree, then the tail in order: the same arithmetic for every
// output, whichever group it is computed in.
template <class Real>
void dot4_double(const Real* a, const Real* const b[4], size_t k, double out[4]) {
  Vec2d lo0 = {}, hi0 = {}, lo1 = {}, hi1 = {}, lo2 = {}, hi2 = {}, lo3 = {}, hi3 = {};
  size_t p = 0;
  for (; p + 4 <= k; p += 4) {
    const Four av = load4(a + p);
    const Four b0 = load4(b[0] + p);
    lo0 += av.lo * b0.lo;
    hi0 += av.hi * b0.hi;
    const Four b1 = load4(b[1] + p);
    lo1 += av.lo * b1.lo;
    hi1 += av.hi * b1.hi;
    const Four b2 = load4(b[2] + p);
    lo2 += av.lo * b2.lo;
    hi2 += av.hi * b2.hi;
    const Four b3 = load4(b[3] + p);
    lo3 += av.lo * b3.lo;
    hi3 += av.hi * b3.hi;
  }
  out[0] = sum_lanes(lo0, hi0);
  out[1] = sum_lanes(lo1, hi1);
  out[2] = sum_lanes(lo2, hi2);
  out[3] = sum_lanes(lo3, hi3);
  for (; p < k; ++p)
    for (size_t g = 0; g < 4; ++g) out[g] += double(a[p]) * double(b[g][p]);
}

// As a type, so that matmul_nt inlines it.
template <class Real>
struct Dot4Double {
  void operator()(const Real* a, const Real* const b[4], size_t k, double out[4]) const {
    dot4_double(a, b, k, out);
  }
};

// c[i, j] (+)= sum_p a[i, p] * b[j, p]: a [m, k], b [n, k], c [m, n], every element by
// Dot4. Blocks of 16 rows of b stay in cache while the rows of a pass over them; threads
// split the larger of m and n (the split changes no element).
template <class Real, class Dot4>
void matmul_nt(const Real* a, size_t m, const Real* b, size_t n, size_t k, Real* c, bool accumulate,
               uint32_t threads, Dot4 dot4) {
  constexpr size_t kBlock = 16;
  const auto tile = [&](size_t i0, size_t i1, size_t j_begin, size_t j_end) {
    for (size_t j0 = j_begin; j0 < j_end; j0 += kBlock) {
      const size_t j1 = std::min(j_end, j0 + kBlock);
      for (size_t i = i0; i < i1; ++i) {
        const Real* ai = a + i * k;
        Real* ci = c + i * n;
        for (size_t j = j0; j < j1; j += 4) {
          // Past the block's end, repeat its last row; those results are dropped.
          const Real* rows[4];
          for (size_t g = 0; g < 4; ++g) rows[g] = b + std::min(j + g, j1 - 1) * k;
          double result[4];
          dot4(ai, rows, k, result);
          for (size_t g = 0; g < 4 && j + g < j1; ++g)
            ci[j + g] = accumulate ? Real(double(ci[j + g]) + result[g]) : Real(result[g]);
        }
      }
    }
  };
  const uint32_t use = threads_for(m * n * k, threads);
  if (m >= n)
    parallel_for(m, use, 4, [&](size_t begin, size_t end) { tile(begin, end, 0, n); });
  else
    parallel_for(n, use, kBlock, [&](size_t begin, size_t end) { tile(0, m, begin, end); });
}

// x [rows, cols] -> [cols, rows].
template <class Real>
std::vector<Real> transposed(const Real* x, size_t rows, size_t cols) {
  std::vector<Real> t(rows * cols);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  return t;
}

}  // namespace

template <class Real>
void linear_forward(const Real* x, size_t rows, size_t in, const Real* w, size_t out, Real* y,
                    Sums sums, uint32_t threads) {
  if constexpr (std::is_same_v<Real, float>) {
    if (sums == Sums::kFloat) {
      matmul_nt(x, rows, w, out, in, y, false, threads,
                [](const float* a, const float* const b[4], size_t k, double r[4]) {
                  dot4_float(a, b, k, r);
                });
      return;
    }
  }
  HSRING_REQUIRE(sums == Sums::kDouble);
  matmul_nt(x, rows, w, out, in, y, false, threads, Dot4Double<Real>{});
}

template <class Real>
void linear_backward_input(const Real* dy, size_t rows, size_t out, const Real* w, size_t in,
                           Real* dx, bool accumulate, uint32_t threads) {
  // Rows of w scaled into double accumulators, four rows of dx per pass over w: no
  // transposed copy of w (the LM head's is as large as the vocabulary).
  constexpr size_t kGroup = 4;
  parallel_for(rows, threads_for(rows * in * out, threads), kGroup, [&](size_t begin, size_t end) {
    std::vector<double> acc(kGroup * in);
    for (size_t r0 = begin; r0 < end; r0 += kGroup) {
      const size_t n = std::min(kGroup, end - r0);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t o = 0; o < out; ++o)
        for (size_t g = 0; g < n; ++g)
          axpy_double(double(dy[(r0 + g) * out + o]), w + o * in, acc.data() + g * in, in);
      for (size_t g = 0; g < n; ++g) {
        const double* a = acc.data() + g * in;
        Real* d = dx + (r0 + g) * in;
        for (size_t i = 0; i < in; ++i) d[i] = accumulate ? Real(double(d[i]) + a[i]) : Real(a[i]);
      }
    }
  });
}

template <class Real>
void linear_backward_weight(const Real* dy, size_t rows, size_t out, const Real* x, size_t in,
                            Real* dw, uint32_t threads) {
  // dw = dy^T x as dot products over rows: transposed copies of dy and x (activation-sized).
  const std::vector<Real> dy_t = transposed(dy, rows, out);
  const std::vector<Real> x_t = transposed(x, rows, in);
  matmul_nt(dy_t.data(), out, x_t.data(), in, rows, dw, true, threads, Dot4Double<Real>{});
}

#define HSRING_OPS_LINEAR(Real)                                                                 \
  template void linear_forward(const Real*, size_t, size_t, const Real*, size_t, Real*, Sums,   \
                               uint32_t);                                                       \
  template void linear_backward_input(const Real*, size_t, size_t, const Real*, size_t, Real*,  \
                                      bool, uint32_t);                                          \
  template void linear_backward_weight(const Real*, size_t, size_t, const Real*, size_t, Real*, \
                                       uint32_t);
HSRING_OPS_LINEAR(float)
HSRING_OPS_LINEAR(double)
#undef HSRING_OPS_LINEAR

}  // namespace hsring::ops
