#include "ops/rms_norm.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include "common/contract.h"
#include "ops/dot.h"

namespace hsring::ops {

namespace {

// Acc: the type of the scale and of the products (float for kFloat, double for kDouble).
template <class Acc, class Real>
void normalise(const Real* x, const Real* weight, size_t rows, size_t dim, double eps, Real* y) {
  for (size_t r = 0; r < rows; ++r) {
    const Real* xr = x + r * dim;
    Real* yr = y + r * dim;
    const auto scale = Acc(1.0 / std::sqrt(dot_double(xr, xr, dim) / double(dim) + eps));
    for (size_t i = 0; i < dim; ++i) yr[i] = Real(Acc(xr[i]) * scale * Acc(weight[i]));
  }
}

}  // namespace

template <class Real>
void rms_norm_forward(const Real* x, const Real* weight, size_t rows, size_t dim, double eps,
                      Real* y, Sums sums) {
  if constexpr (std::is_same_v<Real, float>) {
    if (sums == Sums::kFloat) return normalise<float>(x, weight, rows, dim, eps, y);
  }
  HSRING_REQUIRE(sums == Sums::kDouble);
  normalise<double>(x, weight, rows, dim, eps, y);
}

template <class Real>
void rms_norm_backward(const Real* x, const Real* weight, const Real* dy, size_t rows, size_t dim,
                       double eps, Real* dx, bool accumulate, Real* dweight) {
  // With s = 1 / rms(x) and xhat = x s:  y_i = w_i xhat_i,
  //   dx_j = s (w_j dy_j - xhat_j * sum_i(w_i dy_i xhat_i) / dim),  dw_i += dy_i xhat_i.
  std::vector<double> dweight_acc(dim, 0.0);
  for (size_t r = 0; r < rows; ++r) {
    const Real* xr = x + r * dim;
    const Real* dyr = dy + r * dim;
    Real* dxr = dx + r * dim;
    const double s = 1.0 / std::sqrt(dot_double(xr, xr, dim) / double(dim) + eps);
    double projection = 0;
    for (size_t i = 0; i < dim; ++i)
      projection += double(weight[i]) * double(dyr[i]) * (double(xr[i]) * s);
    projection /= double(dim);
    for (size_t i = 0; i < dim; ++i) {
      const double xhat = double(xr[i]) * s;
      dweight_acc[i] += double(dyr[i]) * xhat;
      const double d = s * (double(weight[i]) * double(dyr[i]) - xhat * projection);
      dxr[i] = accumulate ? Real(double(dxr[i]) + d) : Real(d);
    }
  }
  for (size_t i = 0; i < dim; ++i) dweight[i] = Real(double(dweight[i]) + dweight_acc[i]);
}

#define HSRING_OPS_RMS_NORM(Real)                                                                \
  template void rms_norm_forward(const Real*, const Real*, size_t, size_t, double, Real*, Sums); \
  template void rms_norm_backward(const Real*, const Real*, const Real*, size_t, size_t, double, \
                                  Real*, bool, Real*);
HSRING_OPS_RMS_NORM(float)
HSRING_OPS_RMS_NORM(double)
#undef HSRING_OPS_RMS_NORM

}  // namespace hsring::ops
