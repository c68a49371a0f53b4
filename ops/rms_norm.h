// RMSNorm per row, forward and backward: y = x / sqrt(mean(x^2) + eps) * weight.
#pragma once

#include <cstddef>

#include "ops/sums.h"

namespace hsring::ops {

// x, y [rows, dim]; y may alias x. The mean of squares is a double dot_double either way;
// the scale and the products are fp32 with kFloat, double with kDouble.
// REQUIRES: sums == kDouble unless Real is float.
template <class Real>
void rms_norm_forward(const Real* x, const Real* weight, size_t rows, size_t dim, double eps,
                      Real* y, Sums sums);

// dx written or accumulated (may not alias x or dy), dweight [dim] accumulated; in double.
template <class Real>
void rms_norm_backward(const Real* x, const Real* weight, const Real* dy, size_t rows, size_t dim,
                       double eps, Real* dx, bool accumulate, Real* dweight);

}  // namespace hsring::ops
