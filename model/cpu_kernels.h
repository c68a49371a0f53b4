// The fp32 building blocks of the CPU reference forward. Each output element is computed
// by one fixed sequence of operations that depends only on its own inputs, never on the
// row's place in the batch or on the thread count, so results are bit-reproducible.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace hsring::cpu {

// Sum of a[i] * b[i], accumulated in eight interleaved lanes (explicit 4-wide vectors, no
// reassociation flags needed) and then a fixed reduction tree.
float dot(const float* a, const float* b, size_t n);

// y[r, o] = dot(x[r, :], w[o, :]): x is [rows, in], w is [out, in] (HF Linear layout), y is
// [rows, out]. Blocks of w stay in cache while every row passes over them; each element is
// exactly dot(x[r, :], w[o, :]).
void linear(const float* x, size_t rows, size_t in, const float* w, size_t out, float* y,
            uint32_t threads);

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, per row of `dim`. y may alias x.
void rms_norm(const float* x, const float* weight, size_t rows, size_t dim, double eps, float* y);

// RoPE's inverse frequencies theta^(-2i / head_dim), i < head_dim / 2, in double: the one
// rule of the CPU angles below and of the CUDA tables (target forward, drafter step).
inline std::vector<double> rope_inverse_frequencies(size_t head_dim, double theta) {
  std::vector<double> inv_freq(head_dim / 2);
  for (size_t i = 0; i < inv_freq.size(); ++i)
    inv_freq[i] = std::pow(theta, -double(2 * i) / double(head_dim));
  return inv_freq;
}

// cos and sin [rows, head_dim / 2] of angle position * theta^(-2i / head_dim), computed in
// double and rounded once to Real (float for forwards, double for gradient checks).
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

// Rotates every head of x [rows, heads * head_dim] in place, pairing element i with
// i + rotary_dim / 2 (the HF "rotate_half" convention, not interleaved pairs) for i <
// rotary_dim / 2; the dims past rotary_dim (partial RoPE) are left as they are. cos and sin
// are [rows, rotary_dim / 2]. rotary_dim 0 means head_dim.
void apply_rope(float* x, size_t rows, size_t heads, size_t head_dim, const float* cos,
                const float* sin, size_t rotary_dim = 0);

// x[r, i] += bias[i] for every row of x [rows, dim].
void add_bias(float* x, size_t rows, size_t dim, const float* bias);

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). out may alias gate or up.
void swiglu(const float* gate, const float* up, size_t n, float* out);

// Causal softmax attention over packed documents: token t of document d attends to tokens
// doc_offsets[d] .. t only. q is [rows, heads * head_dim], k and v [rows, kv_heads *
// head_dim]; query head h reads KV head h / (heads / kv_heads). out is [rows, heads *
// head_dim]. Scores are scaled by 1 / sqrt(head_dim).
// REQUIRES: doc_offsets is 0 = o_0 < o_1 < ... < o_D = rows; heads % kv_heads == 0.
void packed_causal_attention(const float* q, const float* k, const float* v, size_t rows,
                             size_t heads, size_t kv_heads, size_t head_dim,
                             std::span<const int32_t> doc_offsets, float* out, uint32_t threads);

// Index of the largest of x[0..n), the first one on ties; NaNs are skipped (0 if all are).
int32_t argmax(const float* x, size_t n);

}  // namespace hsring::cpu
