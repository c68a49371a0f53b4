// The row-gather kernels (gpu/ops/gather_rows.h).
#include <cuda_runtime.h>

#include <algorithm>

#include "gpu/bf16.cuh"
#include "gpu/grid_stride.cuh"
#include "gpu/launch_grid.h"
#include "gpu/ops/gather_rows.h"

namespace hsring::gpu {

namespace {

constexpr int kThreads = 256;

// Rows over the grid's y, a row's values over its x, four at a time where the rows allow
// it (an index and a division an element made this a quarter of the bandwidth).
template <class T>
__global__ void gather_rows_kernel(const T* __restrict__ table, const int32_t* __restrict__ index,
                                   uint32_t rows, uint32_t dim, uint32_t table_stride,
                                   float* __restrict__ y, uint16_t* __restrict__ y_bf16) {
  for (uint32_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int32_t from = index[r];
    float* out = y ? y + uint64_t(r) * dim : nullptr;
    uint16_t* out_bf16 = y_bf16 ? y_bf16 + uint64_t(r) * dim : nullptr;
    if (from < 0) {
      quads_then_rest(
          dim, four_aligned(out, out_bf16),
          [&](uint64_t q) { store4(out, out_bf16, q, make_float4(0.0f, 0.0f, 0.0f, 0.0f)); },
          [&](uint64_t i) { store(out, out_bf16, i, 0.0f); });
      continue;
    }
    const T* in = table + uint64_t(from) * table_stride;
    quads_then_rest(
        dim, four_aligned(in, out, out_bf16),
        [&](uint64_t q) { store4(out, out_bf16, q, load4(in, q)); },
        [&](uint64_t i) { store(out, out_bf16, i, load(in, i)); });
  }
}

template <class T>
cudaError_t gather_rows(const T* table, const int32_t* index, uint32_t rows, uint32_t dim, float* y,
                        cudaStream_t stream, uint16_t* y_bf16, uint32_t table_stride) {
  if (table_stride == 0) table_stride = dim;
  if (table_stride < dim) return cudaErrorInvalidValue;
  if (rows == 0 || dim == 0) return cudaSuccess;
  const dim3 grid((dim / 4 + kThreads) / kThreads, std::min(rows, 65535u));
  gather_rows_kernel<<<grid, kThreads, 0, stream>>>(table, index, rows, dim, table_stride, y,
                                                    y_bf16);
  return cudaGetLastError();
}

// dst row dst_rows[r] = src row r, `words` 32-bit words a row (bf16 pairs).
__global__ void scatter_rows_kernel(const uint32_t* __restrict__ src,
                                    const int32_t* __restrict__ dst_rows, uint32_t rows,
                                    uint32_t words, uint32_t* __restrict__ dst) {
  HSRING_GRID_STRIDE(i, uint64_t(rows) * words) {
    const uint64_t r = i / words, w = i % words;
    dst[uint64_t(dst_rows[r]) * words + w] = src[i];
  }
}

}  // namespace

cudaError_t launch_gather_rows(const float* table, const int32_t* index, uint32_t rows,
                               uint32_t dim, float* y, cudaStream_t stream, uint16_t* y_bf16,
                               uint32_t table_stride) {
  return gather_rows(table, index, rows, dim, y, stream, y_bf16, table_stride);
}

cudaError_t launch_gather_rows(const uint16_t* table, const int32_t* index, uint32_t rows,
                               uint32_t dim, float* y, cudaStream_t stream, uint16_t* y_bf16,
                               uint32_t table_stride) {
  return gather_rows(table, index, rows, dim, y, stream, y_bf16, table_stride);
}

cudaError_t launch_scatter_rows(const uint16_t* src, const int32_t* dst_rows, uint32_t rows,
                                uint32_t width, uint16_t* dst, cudaStream_t stream) {
  if (width % 2 != 0) return cudaErrorInvalidValue;
  const uint64_t count = uint64_t(rows) * (width / 2);
  scatter_rows_kernel<<<grid_stride_blocks(count, kThreads), kThreads, 0, stream>>>(
      reinterpret_cast<const uint32_t*>(src), dst_rows, rows, width / 2,
      reinterpret_cast<uint32_t*>(dst));
  return cudaGetLastError();
}

}  // namespace hsring::gpu
