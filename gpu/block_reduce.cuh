// Sums and maxima over a warp and over a block in a fixed tree (xor shuffles, then the warps'
// partials in index order), for every CUDA file of gpu/, model/ and train/: the bits of a
// reduction never depend on scheduling, and every lane or thread gets the same total.
#pragma once

#include <cuda_runtime.h>

namespace hsring::gpu {

// T: float or double.
template <class T>
__device__ __forceinline__ T warp_sum(T value) {
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_xor_sync(0xFFFFFFFFu, value, offset);
  return value;
}

__device__ __forceinline__ float warp_max(float value) {
  for (int offset = 16; offset > 0; offset >>= 1)
    value = fmaxf(value, __shfl_xor_sync(0xFFFFFFFFu, value, offset));
  return value;
}

// Sum over a block of kWarps warps; every thread gets the total. partials: kWarps floats of
// shared memory. The leading barrier lets a caller use it again right away with the same
// partials (the next row, or a second sum of the same row). REQUIRES: blockDim.x == 32 kWarps,
// every thread of the block calls it.
template <int kWarps>
__device__ __forceinline__ float block_sum(float value, float* partials) {
  value = warp_sum(value);
  __syncthreads();
  if (threadIdx.x % 32 == 0) partials[threadIdx.x / 32] = value;
  __syncthreads();
  float total = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += partials[w];
  return total;
}

}  // namespace hsring::gpu
