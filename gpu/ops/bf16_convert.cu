// The conversion kernels (gpu/ops/bf16_convert.h): bandwidth-bound, four values a thread
// where the arrays allow it.
#include <cuda_runtime.h>

#include "gpu/bf16.cuh"
#include "gpu/grid_stride.cuh"
#include "gpu/launch_grid.h"
#include "gpu/ops/bf16_convert.h"

namespace hsring::gpu {

namespace {

constexpr int kThreads = 256;

// 16 blocks per SM: the training step is 2% slower with 8 (drafter_step_bench, bench/RESULTS.md).
unsigned grid_for(uint64_t work_items) { return grid_stride_blocks(work_items, kThreads, 16); }

__global__ void bf16_to_float_kernel(const uint16_t* __restrict__ in, uint64_t n,
                                     float* __restrict__ out) {
  HSRING_GRID_STRIDE(i, n) out[i] = bf16_to_float(in[i]);
}

__global__ void float_to_bf16_kernel(const float* __restrict__ in, uint64_t n,
                                     uint16_t* __restrict__ out) {
  quads_then_rest(
      n, four_aligned(in, out), [&](uint64_t q) { store4(nullptr, out, q, load4(in, q)); },
      [&](uint64_t i) { out[i] = float_to_bf16(in[i]); });
}

// Four values a thread when every row starts on a 16-byte (in) and 8-byte (out) boundary.
__global__ void float_to_bf16_rows_kernel(const float* __restrict__ in, uint64_t rows,
                                          uint64_t cols, uint16_t* __restrict__ out,
                                          uint64_t out_stride) {
  const bool aligned = cols % 4 == 0 && out_stride % 4 == 0 && four_aligned(in, out);
  quads_then_rest(
      rows * cols, aligned,
      [&](uint64_t q) {
        const uint64_t row = 4 * q / cols, col = 4 * q - row * cols;
        store4(nullptr, out + row * out_stride + col, 0, load4(in, q));
      },
      [&](uint64_t i) {
        const uint64_t row = i / cols;
        out[row * out_stride + (i - row * cols)] = float_to_bf16(in[i]);
      });
}

}  // namespace

cudaError_t launch_bf16_to_float(const uint16_t* in, size_t n, float* out, cudaStream_t stream) {
  bf16_to_float_kernel<<<grid_for(n), kThreads, 0, stream>>>(in, n, out);
  return cudaGetLastError();
}

cudaError_t launch_float_to_bf16(const float* in, size_t n, uint16_t* out, cudaStream_t stream) {
  float_to_bf16_kernel<<<grid_for(n / 4 + 1), kThreads, 0, stream>>>(in, n, out);
  return cudaGetLastError();
}

cudaError_t launch_float_to_bf16_rows(const float* in, size_t rows, size_t cols, uint16_t* out,
                                      size_t out_stride, cudaStream_t stream) {
  if (out_stride < cols) return cudaErrorInvalidValue;
  const uint64_t n = uint64_t(rows) * cols;
  if (n == 0) return cudaSuccess;
  float_to_bf16_rows_kernel<<<grid_for(n / 4 + 1), kThreads, 0, stream>>>(in, rows, cols, out,
                                                                          out_stride);
  return cudaGetLastError();
}

}  // namespace hsring::gpu
