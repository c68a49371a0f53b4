// The embedding kernels (gpu/ops/embedding.h): one thread an element.
#include <cuda_runtime.h>

#include "gpu/grid_stride.cuh"
#include "gpu/launch_grid.h"
#include "gpu/ops/embedding.h"

namespace hsring::gpu {

namespace {

constexpr int kThreads = 256;

unsigned grid_for(uint64_t work_items) { return grid_stride_blocks(work_items, kThreads, 16); }

__global__ void embedding_forward_kernel(const float* __restrict__ table,
                                         const int32_t* __restrict__ tokens, uint32_t rows,
                                         uint32_t dim, float* __restrict__ y) {
  HSRING_GRID_STRIDE(e, uint64_t(rows) * dim) {
    const uint64_t r = e / dim;
    y[e] += table[uint64_t(tokens[r]) * dim + (e - r * dim)];
  }
}

__global__ void embedding_backward_kernel(const int32_t* __restrict__ tokens,
                                          const float* __restrict__ dy, uint32_t rows, uint32_t dim,
                                          float* __restrict__ dtable) {
  HSRING_GRID_STRIDE(e, uint64_t(rows) * dim) {
    const uint64_t r = e / dim;
    atomicAdd(dtable + uint64_t(tokens[r]) * dim + (e - r * dim), dy[e]);
  }
}

}  // namespace

cudaError_t launch_embedding_forward(const float* table, const int32_t* tokens, uint32_t rows,
                                     uint32_t dim, float* y, cudaStream_t stream) {
  embedding_forward_kernel<<<grid_for(uint64_t(rows) * dim), kThreads, 0, stream>>>(table, tokens,
                                                                                    rows, dim, y);
  return cudaGetLastError();
}

cudaError_t launch_embedding_backward(const int32_t* tokens, const float* dy, uint32_t rows,
                                      uint32_t dim, float* dtable, cudaStream_t stream) {
  embedding_backward_kernel<<<grid_for(uint64_t(rows) * dim), kThreads, 0, stream>>>(
      tokens, dy, rows, dim, dtable);
  return cudaGetLastError();
}

}  // namespace hsring::gpu
