#include "ops/swiglu.h"

#include <cmath>
#include <type_traits>

#include "common/contract.h"

namespace hsring::ops {

namespace {

template <class Acc, class Real>
void gate_up(const Real* gate, const Real* up, size_t n, Real* out) {
  for (size_t i = 0; i < n; ++i) {
    const Acc g = gate[i];
    out[i] = Real(g / (Acc(1) + std::exp(-g)) * Acc(up[i]));
  }
}

}  // namespace

template <class Real>
void swiglu_forward(const Real* gate, const Real* up, size_t n, Real* out, Sums sums) {
  if constexpr (std::is_same_v<Real, float>) {
    if (sums == Sums::kFloat) return gate_up<float>(gate, up, n, out);
  }
  HSRING_REQUIRE(sums == Sums::kDouble);
  gate_up<double>(gate, up, n, out);
}

template <class Real>
void swiglu_backward(const Real* gate, const Real* up, const Real* dout, size_t n, Real* dgate,
                     Real* dup) {
  // silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
  for (size_t i = 0; i < n; ++i) {
    const double g = gate[i];
    const double sig = 1.0 / (1.0 + std::exp(-g));
    const double d = dout[i];
    dgate[i] = Real(d * double(up[i]) * sig * (1.0 + g * (1.0 - sig)));
    dup[i] = Real(d * g * sig);
  }
}

#define HSRING_OPS_SWIGLU(Real)                                                \
  template void swiglu_forward(const Real*, const Real*, size_t, Real*, Sums); \
  template void swiglu_backward(const Real*, const Real*, const Real*, size_t, Real*, Real*);
HSRING_OPS_SWIGLU(float)
HSRING_OPS_SWIGLU(double)
#undef HSRING_OPS_SWIGLU

}  // namespace hsring::ops
