#include "ops/rope.h"

#include <type_traits>

#include "common/contract.h"

namespace hsring::ops {

namespace {

// Rotates each pair (i, i + half) by +angle (direction 1: forward) or -angle (-1: the
// transpose), with Acc arithmetic.
template <class Acc, class Real>
void rotate(Real* x, const RopeShape& shape, const Real* cos, const Real* sin, Acc direction) {
  const size_t half = (shape.rotary_dim ? shape.rotary_dim : shape.head_dim) / 2;
  for (size_t r = 0; r < shape.rows; ++r) {
    const Real* c = cos + r * half;
    const Real* s = sin + r * half;
    for (size_t h = 0; h < shape.heads; ++h) {
      Real* v = x + (r * shape.heads + h) * shape.head_dim;
      for (size_t i = 0; i < half; ++i) {
        const Acc a = v[i];
        const Acc b = v[i + half];
        const Acc ci = c[i];
        const Acc si = direction * Acc(s[i]);  // exact: direction is +-1
        v[i] = Real(a * ci - b * si);
        v[i + half] = Real(b * ci + a * si);
      }
    }
  }
}

}  // namespace

template <class Real>
void rope_forward(Real* x, const RopeShape& shape, const Real* cos, const Real* sin, Sums sums) {
  if constexpr (std::is_same_v<Real, float>) {
    if (sums == Sums::kFloat) return rotate<float>(x, shape, cos, sin, 1.0f);
  }
  HSRING_REQUIRE(sums == Sums::kDouble);
  rotate<double>(x, shape, cos, sin, 1.0);
}

template <class Real>
void rope_backward(Real* dx, const RopeShape& shape, const Real* cos, const Real* sin) {
  rotate<double>(dx, shape, cos, sin, -1.0);
}

#define HSRING_OPS_ROPE(Real)                                                          \
  template void rope_forward(Real*, const RopeShape&, const Real*, const Real*, Sums); \
  template void rope_backward(Real*, const RopeShape&, const Real*, const Real*);
HSRING_OPS_ROPE(float)
HSRING_OPS_ROPE(double)
#undef HSRING_OPS_ROPE

}  // namespace hsring::ops
