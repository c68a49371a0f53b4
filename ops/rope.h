// Rotary position embedding, forward and backward, in the Hugging Face "rotate_half"
// convention: element i of a head is paired with i + rotary_dim / 2 (not interleaved pairs),
// for i < rotary_dim / 2; the dims past rotary_dim (partial RoPE) are left as they are.
// The scaled tables of the target's RoPE variants (Llama 3, YaRN, NTK) are model/rope.h's.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "ops/sums.h"

namespace hsring::ops {

// RoPE's inverse frequencies theta^(-2i / head_dim), i < head_dim / 2, in double: the one
// rule of the CPU angles below and of the CUDA tables (target forward, drafter step).
inline std::vector<double> rope_inverse_frequencies(size_t head_dim, double theta) {
  std::vector<double> inv_freq(head_dim / 2);
  for (size_t i = 0; i < inv_freq.size(); ++i)
    inv_freq[i] = std::pow(theta, -double(2 * i) / double(head_dim));
  return inv_freq;
}

// cos and sin [rows, head_dim / 2] of angle position * theta^(-2i / head_dim), computed in
// double and rounded once to Real (float for models, double for gradient checks).
template <class Real>
void rope_angles(std::span<const int32_t> positions, size_t head_dim, double theta, Real* cos,
                 Real* sin) {
  const size_t half = head_dim / 2;
  const std::vector<double> inv_freq = rope_inverse_frequencies(head_dim, theta);
  for (size_t r = 0; r < positions.size(); ++r) {
    for (size_t i = 0; i < half; ++i) {
      const double angle = double(positions[r]) * inv_freq[i];
      cos[r * half + i] = Real(std::cos(angle));
      sin[r * half + i] = Real(std::sin(angle));
    }
  }
}

// Which dims of a head rotate: rotary_dim 0 means all of head_dim.
struct RopeShape {
  size_t rows = 0;
  size_t heads = 0;
  size_t head_dim = 0;
  size_t rotary_dim = 0;
};

// Rotates every head of x [rows, heads * head_dim] in place; cos and sin are [rows,
// rotary_dim / 2]. fp32 arithmetic with kFloat, double rounded once with kDouble.
// REQUIRES: sums == kDouble unless Real is float.
template <class Real>
void rope_forward(Real* x, const RopeShape& shape, const Real* cos, const Real* sin, Sums sums);

// The transpose (inverse) rotation, in place and in double: turns d/d(rotated) into
// d/d(input).
template <class Real>
void rope_backward(Real* dx, const RopeShape& shape, const Real* cos, const Real* sin);

}  // namespace hsring::ops
