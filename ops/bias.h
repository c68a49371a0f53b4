// A bias added to every row (Qwen2's q, k, v projections), forward and backward.
#pragma once

#include <cstddef>

namespace hsring::ops {

// x[r, i] += bias[i] for every row of x [rows, dim] (exact in either precision: one add).
template <class Real>
void bias_forward(Real* x, size_t rows, size_t dim, const Real* bias);

// dbias[i] += sum over rows of dy[r, i], in row order, in double.
template <class Real>
void bias_backward(const Real* dy, size_t rows, size_t dim, Real* dbias);

}  // namespace hsring::ops
