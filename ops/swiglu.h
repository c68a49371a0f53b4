// SwiGLU, forward and backward: out = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
#pragma once

#include <cstddef>

#include "ops/sums.h"

namespace hsring::ops {

// out may alias gate or up. fp32 arithmetic with kFloat, double rounded once with kDouble.
// REQUIRES: sums == kDouble unless Real is float.
template <class Real>
void swiglu_forward(const Real* gate, const Real* up, size_t n, Real* out, Sums sums);

// dgate and dup written, in double; they may not alias the inputs.
template <class Real>
void swiglu_backward(const Real* gate, const Real* up, const Real* dout, size_t n, Real* dgate,
                     Real* dup);

}  // namespace hsring::ops
