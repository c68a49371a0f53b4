// The RoPE op: the angle table of a batch's positions (the target's forward and both
// trainers), and the rotation of every head of fp32 rows with it, forward and backward (the
// same-position drafter's step; the target applies it inside model/cuda_kernels.h's
// launch_qkv_finish, the DFlash step inside train/cuda_qk_norm_rope.h). Plain host functions
// (no CUDA syntax: C++ sources call them); each launches on `stream` and returns the launch's
// error; none synchronises.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace hsring::gpu {

// cos, sin [rows, half] of positions[r] * inv_freq[i], the product and sincos in double
// (positions reach 1e5 radians: fp32 would lose the angle), times `scale` (YaRN's attention
// factor, else 1), rounded once to fp32. With row_bases (dynamic NTK RoPE, one base per
// row) the frequencies are row_bases[r]^(-i / half) instead of inv_freq.
cudaError_t launch_rope_table(const int32_t* positions, uint32_t rows, const double* inv_freq,
                              const double* row_bases, double scale, uint32_t half, float* cos,
                              float* sin, cudaStream_t stream);

// RoPE on every head of x [rows, heads * head_dim] in place, pairing i with i + head_dim / 2
// (HF rotate_half); cos and sin [rows, head_dim / 2]. inverse: the transpose rotation,
// which turns d/d(rotated) into d/d(input): the backward.
cudaError_t launch_rope_apply(float* x, uint32_t rows, uint32_t heads, uint32_t head_dim,
                              const float* cos, const float* sin, bool inverse,
                              cudaStream_t stream);

}  // namespace hsring::gpu
