// Dot products and scaled sums in fixed lanes: the arithmetic every op sums with, in fp32
// (Sums::kFloat) and in double (Sums::kDouble). Explicit 16-byte vectors (SSE / NEON width:
// no -march, no reassociation flags); vector arithmetic is lane-wise IEEE, so a lane's sum
// is exactly the scalar one and the result depends on n alone.
#pragma once

#include <cstddef>
#include <cstring>

namespace hsring::ops {

namespace lanes {

typedef float Vec4f __attribute__((vector_size(16)));
typedef double Vec2d __attribute__((vector_size(16)));

inline Vec4f load4f(const float* p) {
  Vec4f v;
  std::memcpy(&v, p, sizeof(v));  // unaligned load
  return v;
}

// Four consecutive values as double, in two 2-lane halves.
struct Four {
  Vec2d lo, hi;
};
inline Four load4(const float* p) {
  typedef double Vec4d __attribute__((vector_size(32)));
  const Vec4d d = __builtin_convertvector(load4f(p), Vec4d);  // cvtps2pd on x86
  return {Vec2d{d[0], d[1]}, Vec2d{d[2], d[3]}};
}
inline Four load4(const double* p) {
  Four f;
  std::memcpy(&f.lo, p, sizeof(f.lo));
  std::memcpy(&f.hi, p + 2, sizeof(f.hi));
  return f;
}

inline double sum_lanes(Vec2d lo, Vec2d hi) { return (lo[0] + lo[1]) + (hi[0] + hi[1]); }

// The fixed reduction tree of eight fp32 lanes, then the tail [from, n) in order.
inline float finish(Vec4f lo, Vec4f hi, const float* a, const float* b, size_t from, size_t n) {
  float sum = ((lo[0] + lo[1]) + (lo[2] + lo[3])) + ((hi[0] + hi[1]) + (hi[2] + hi[3]));
  for (size_t i = from; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace lanes

// Sum of a[i] * b[i] in fp32: element i in lane i % 8, the tree ((0+1)+(2+3))+((4+5)+(6+7)),
// then the tail in order. linear_forward(Sums::kFloat) computes each element exactly so.
inline float dot(const float* a, const float* b, size_t n) {
  using namespace lanes;
  Vec4f lo = {}, hi = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    lo += load4f(a + i) * load4f(b + i);
    hi += load4f(a + i + 4) * load4f(b + i + 4);
  }
  return finish(lo, hi, a, b, i, n);
}

// The same lanes and tree in double (inputs widened exactly).
template <class Real>
double dot_double(const Real* a, const Real* b, size_t n) {
  using namespace lanes;
  Vec2d s0 = {}, s1 = {}, s2 = {}, s3 = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const Four a0 = load4(a + i), b0 = load4(b + i);
    const Four a1 = load4(a + i + 4), b1 = load4(b + i + 4);
    s0 += a0.lo * b0.lo;
    s1 += a0.hi * b0.hi;
    s2 += a1.lo * b1.lo;
    s3 += a1.hi * b1.hi;
  }
  double sum = sum_lanes(s0, s1) + sum_lanes(s2, s3);
  for (; i < n; ++i) sum += double(a[i]) * double(b[i]);
  return sum;
}

// acc[i] += a * x[i] in fp32, four lanes at a time: each element on its own (one multiply,
// one add), so the vector width changes no bit. Explicit, as -O2's cost model leaves the
// scalar loop alone (it would need a runtime alias check).
inline void axpy_float(float a, const float* x, float* acc, size_t n) {
  using namespace lanes;
  const Vec4f av = {a, a, a, a};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    Vec4f v;
    std::memcpy(&v, acc + i, sizeof(v));
    v += av * load4f(x + i);
    std::memcpy(acc + i, &v, sizeof(v));
  }
  for (; i < n; ++i) acc[i] += a * x[i];
}

// acc[i] += a * x[i] in double: each element on its own, so the vector width changes no bit.
template <class Real>
void axpy_double(double a, const Real* x, double* acc, size_t n) {
  using namespace lanes;
  const Vec2d av = {a, a};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const Four xv = load4(x + i);
    Vec2d lo, hi;
    std::memcpy(&lo, acc + i, sizeof(lo));
    std::memcpy(&hi, acc + i + 2, sizeof(hi));
    lo += av * xv.lo;
    hi += av * xv.hi;
    std::memcpy(acc + i, &lo, sizeof(lo));
    std::memcpy(acc + i + 2, &hi, sizeof(hi));
  }
  for (; i < n; ++i) acc[i] += a * double(x[i]);
}

}  // namespace hsring::ops
