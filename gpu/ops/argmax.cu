// The argmax kernel (gpu/ops/argmax.h): one block a row, reduced in a fixed tree (warp
// shuffles, then the warps' results in index order) over a total order, so its result never
// depends on scheduling.
#include <cuda_runtime.h>

#include <cmath>

#include "gpu/ops/argmax.h"

namespace hsring::gpu {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Rows handled by one block each: the grid covers them directly up to a cap.
unsigned row_grid(uint32_t rows) { return rows < 65535u * 8 ? rows : 65535u * 8; }

// Is (value, index) ahead of (best, best_index) in the order "larger value, then smaller
// index"? `n` marks "nothing yet". A total order, so any reduction tree picks the same one.
__device__ __forceinline__ bool ahead(float value, uint32_t index, float best, uint32_t best_index,
                                      uint32_t n) {
  if (index == n) return false;
  if (best_index == n) return true;
  return value > best || (value == best && index < best_index);
}

__global__ void argmax_kernel(const float* __restrict__ logits, uint32_t rows, uint32_t n,
                              int32_t* __restrict__ out) {
  __shared__ float best_values[kWarps];
  __shared__ uint32_t best_indices[kWarps];
  for (uint32_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* x = logits + uint64_t(row) * n;
    float best = -INFINITY;
    uint32_t best_index = n;
    for (uint32_t i = threadIdx.x; i < n; i += kThreads) {
      const float value = x[i];
      if (!isnan(value) && ahead(value, i, best, best_index, n)) {
        best = value;
        best_index = i;
      }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float other = __shfl_xor_sync(0xFFFFFFFFu, best, offset);
      const uint32_t other_index = __shfl_xor_sync(0xFFFFFFFFu, best_index, offset);
      if (ahead(other, other_index, best, best_index, n)) {
        best = other;
        best_index = other_index;
      }
    }
    if (threadIdx.x % 32 == 0) {
      best_values[threadIdx.x / 32] = best;
      best_indices[threadIdx.x / 32] = best_index;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kWarps; ++w)
        if (ahead(best_values[w], best_indices[w], best, best_index, n)) {
          best = best_values[w];
          best_index = best_indices[w];
        }
      out[row] = best_index == n ? 0 : int32_t(best_index);
    }
    __syncthreads();
  }
}

}  // namespace

cudaError_t launch_argmax(const float* logits, uint32_t rows, uint32_t n, int32_t* out,
                          cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  argmax_kernel<<<row_grid(rows), kThreads, 0, stream>>>(logits, rows, n, out);
  return cudaGetLastError();
}

}  // namespace hsring::gpu
