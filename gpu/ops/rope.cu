// The RoPE kernels (gpu/ops/rope.h): one thread an angle, one thread a rotated pair.
#include <cuda_runtime.h>

#include "gpu/grid_stride.cuh"
#include "gpu/launch_grid.h"
#include "gpu/ops/rope.h"

namespace hsring::gpu {

namespace {

constexpr int kThreads = 256;

__global__ void rope_table_kernel(const int32_t* __restrict__ positions, uint32_t rows,
                                  const double* __restrict__ inv_freq,
                                  const double* __restrict__ row_bases, double scale, uint32_t half,
                                  float* __restrict__ cos_out, float* __restrict__ sin_out) {
  HSRING_GRID_STRIDE(e, uint64_t(rows) * half) {
    const uint64_t r = e / half;
    const uint32_t i = uint32_t(e - r * half);
    // The host's rule (model/rope.cc): base^(-2i / head_dim), head_dim = 2 half.
    const double freq =
        row_bases ? pow(row_bases[r], -double(2 * i) / double(2 * half)) : inv_freq[i];
    double s, c;
    sincos(double(positions[r]) * freq, &s, &c);
    cos_out[e] = float(c * scale);
    sin_out[e] = float(s * scale);
  }
}

__global__ void rope_apply_kernel(float* __restrict__ x, uint32_t rows, uint32_t heads,
                                  uint32_t head_dim, const float* __restrict__ cos,
                                  const float* __restrict__ sin, float direction) {
  const uint32_t half = head_dim / 2;
  HSRING_GRID_STRIDE(e, uint64_t(rows) * heads * half) {
    const uint64_t row_head = e / half;
    const uint32_t i = uint32_t(e - row_head * half);
    const uint64_t row = row_head / heads;
    float* v = x + row_head * head_dim;
    const float c = cos[row * half + i];
    const float s = direction * sin[row * half + i];
    const float a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}

}  // namespace

cudaError_t launch_rope_table(const int32_t* positions, uint32_t rows, const double* inv_freq,
                              const double* row_bases, double scale, uint32_t half, float* cos,
                              float* sin, cudaStream_t stream) {
  rope_table_kernel<<<grid_stride_blocks(uint64_t(rows) * half, kThreads), kThreads, 0, stream>>>(
      positions, rows, inv_freq, row_bases, scale, half, cos, sin);
  return cudaGetLastError();
}

cudaError_t launch_rope_apply(float* x, uint32_t rows, uint32_t heads, uint32_t head_dim,
                              const float* cos, const float* sin, bool inverse,
                              cudaStream_t stream) {
  const uint64_t pairs = uint64_t(rows) * heads * (head_dim / 2);
  rope_apply_kernel<<<grid_stride_blocks(pairs, kThreads, 16), kThreads, 0, stream>>>(
      x, rows, heads, head_dim, cos, sin, inverse ? -1.0f : 1.0f);
  return cudaGetLastError();
}

}  // namespace hsring::gpu
