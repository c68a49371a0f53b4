// Grid-stride loops of the element-wise kernels (gpu/ops/, model/, train/): a grid sized by
// gpu/launch_grid.h covers any n.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

// for (i = this thread's first item; i < n; i += the grid's threads)
#define HSRING_GRID_STRIDE(i, n)                                              \
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += uint64_t(gridDim.x) * blockDim.x)

namespace hsring::gpu {

// Element-wise kernels are bandwidth-bound: four values a thread where the arrays allow it
// (quad(q) for values 4q .. 4q + 3), one at a time for the rest (one(i)).
template <class Quad, class One>
__device__ __forceinline__ void quads_then_rest(uint64_t n, bool aligned, Quad quad, One one) {
  const uint64_t quads = aligned ? n / 4 : 0;
  HSRING_GRID_STRIDE(q, quads) quad(q);
  HSRING_GRID_STRIDE(r, n - 4 * quads) one(4 * quads + r);
}

}  // namespace hsring::gpu
