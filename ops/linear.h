// Linear in the Hugging Face layout, forward and backward: x [rows, in], w [out, in],
// y [rows, out], y = x w^T. A backward writes the gradient of its input (or adds it to what
// is there when `accumulate` is set) and adds the gradient of its weight, so one flat
// gradient buffer collects a whole backward. Real is float, or double for gradient checks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/sums.h"

namespace hsring::ops {

// Each y[r, o] is dot(x[r, :], w[o, :]) (kFloat) or dot_double (rounded to Real; kDouble's
// lanes are four per output) of ops/dot.h's kind: the same bits whichever block, thread or
// group of four computes it. Blocks of 16 rows of w stay in cache while every row passes.
// REQUIRES: sums == kDouble unless Real is float.
template <class Real>
void linear_forward(const Real* x, size_t rows, size_t in, const Real* w, size_t out, Real* y,
                    Sums sums, uint32_t threads);

// dx [rows, in] (+)= dy w, in double. May not alias dy or w.
template <class Real>
void linear_backward_input(const Real* dy, size_t rows, size_t out, const Real* w, size_t in,
                           Real* dx, bool accumulate, uint32_t threads);

// dw [out, in] += dy^T x, in double.
template <class Real>
void linear_backward_weight(const Real* dy, size_t rows, size_t out, const Real* x, size_t in,
                            Real* dw, uint32_t threads);

}  // namespace hsring::ops
