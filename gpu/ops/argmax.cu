// The argmax kernel (gpu/ops/argmax.h): one block a row, read four values a load where the
// row allows it, reduced in a fixed tree (warp shuffles, then the warps' results in index
// order) over a total order, so its result never depends on scheduling.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

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
  const bool vector = n % 4 == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0;
  for (uint32_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* x = logits + uint64_t(row) * n;
    float best = -INFINITY;
    uint32_t best_index = n;
    const auto consider = [&](float value, uint32_t i) {
      if (!isnan(value) && ahead(value, i, best, best_index, n)) {
        best = value;
        best_index = i;
      }
    };
    // 16-byte loads, several in flight (the logits are far larger than L2); the order is
    // total, so the visiting order does not change the result.
    const uint32_t quads = vector ? n / 4 : 0;
#pragma unroll 4
    for (uint32_t q = threadIdx.x; q < quads; q += kThreads) {
      const float4 v = reinterpret_cast<const float4*>(x)[q];
      consider(v.x, 4 * q);
      consider(v.y, 4 * q + 1);
      consider(v.z, 4 * q + 2);
      consider(v.w, 4 * q + 3);
    }
    for (uint32_t i = 4 * quads + threadIdx.x; i < n; i += kThreads) consider(x[i], i);
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
