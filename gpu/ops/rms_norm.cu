// The RMSNorm kernels (gpu/ops/rms_norm.h). Forward: one warp a row for short rows, else one
// block a row, four values a load where the arrays allow it, and rows up to kCachedRow
// floats read once (kept in registers between the sum of squares and the scaling: the
// target's residual is far larger than L2). Every path sums a thread's values in index order,
// then the block's in gpu/block_reduce.cuh's fixed tree.
#include <cuda_runtime.h>

#include <algorithm>

#include "gpu/bf16.cuh"
#include "gpu/block_reduce.cuh"
#include "gpu/launch_grid.h"
#include "gpu/ops/rms_norm.h"

namespace hsring::gpu {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// The per-head norms (QK-norm: dim = head_dim, hundreds of thousands of rows) with one warp
// a row instead of a 256-thread block: a block of barriers for 128 values made these
// passes cost more than the products around them.
constexpr uint32_t kWarpRowDim = 256;

constexpr int kCachedVectors = 8;
constexpr uint32_t kCachedRow = kThreads * 4 * kCachedVectors;

// One block per row, up to CUDA's grid limit (kernels loop over the rest).
unsigned row_grid(uint32_t rows) { return rows < 65535u ? (rows == 0 ? 1 : rows) : 65535u; }

template <RmsNormScale kScale>
__device__ __forceinline__ float inverse_rms(float sum_of_squares, uint32_t dim, float eps) {
  if constexpr (kScale == RmsNormScale::kFast)
    return rsqrtf(sum_of_squares / float(dim) + eps);
  else
    return 1.0f / sqrtf(sum_of_squares / float(dim) + eps);
}

__device__ __forceinline__ float4 scaled(float4 v, float scale, float4 g) {
  return {v.x * scale * g.x, v.y * scale * g.y, v.z * scale * g.z, v.w * scale * g.w};
}

// kCached: dim % 4 == 0, dim <= kCachedRow and every array four-aligned; the row's float4s
// stay in registers. Otherwise four values a load where the arrays allow it, then the rest.
template <RmsNormScale kScale, bool kCached>
__global__ void rms_norm_forward_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                        uint32_t rows, uint32_t dim, float eps,
                                        float* __restrict__ y, uint16_t* __restrict__ y_bf16,
                                        float* __restrict__ x_copy) {
  __shared__ float partials[kWarps];
  const bool vector = kCached || (dim % 4 == 0 && four_aligned(x, w, y, y_bf16, x_copy));
  const uint32_t quads = vector ? dim / 4 : 0;
  for (uint32_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const uint64_t row = uint64_t(r) * dim;
    const float* xr = x + row;
    float* yr = y ? y + row : nullptr;
    uint16_t* yr_bf16 = y_bf16 ? y_bf16 + row : nullptr;
    float* xr_copy = x_copy ? x_copy + row : nullptr;
    float squares = 0;
    if constexpr (kCached) {
      float4 cache[kCachedVectors];
#pragma unroll
      for (int j = 0; j < kCachedVectors; ++j) {
        const uint32_t q = threadIdx.x + j * kThreads;
        if (q < quads) {
          cache[j] = load4(xr, q);
          squares += cache[j].x * cache[j].x + cache[j].y * cache[j].y + cache[j].z * cache[j].z +
                     cache[j].w * cache[j].w;
        }
      }
      const float scale = inverse_rms<kScale>(block_sum<kWarps>(squares, partials), dim, eps);
#pragma unroll
      for (int j = 0; j < kCachedVectors; ++j) {
        const uint32_t q = threadIdx.x + j * kThreads;
        if (q < quads) {
          if (xr_copy) store4(xr_copy, nullptr, q, cache[j]);
          store4(yr, yr_bf16, q, scaled(cache[j], scale, load4(w, q)));
        }
      }
    } else {
      for (uint32_t q = threadIdx.x; q < quads; q += blockDim.x) {
        const float4 v = load4(xr, q);
        squares += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
      }
      for (uint32_t i = 4 * quads + threadIdx.x; i < dim; i += blockDim.x) squares += xr[i] * xr[i];
      const float scale = inverse_rms<kScale>(block_sum<kWarps>(squares, partials), dim, eps);
      for (uint32_t q = threadIdx.x; q < quads; q += blockDim.x) {
        const float4 v = load4(xr, q);
        if (xr_copy) store4(xr_copy, nullptr, q, v);
        store4(yr, yr_bf16, q, scaled(v, scale, load4(w, q)));
      }
      for (uint32_t i = 4 * quads + threadIdx.x; i < dim; i += blockDim.x) {
        if (xr_copy) xr_copy[i] = xr[i];
        store(yr, yr_bf16, i, xr[i] * scale * w[i]);
      }
    }
  }
}

#define WARP_ROWS(r, rows)                                                              \
  for (uint64_t r = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; r < (rows); \
       r += uint64_t(gridDim.x) * blockDim.x / 32)

template <RmsNormScale kScale>
__global__ void rms_norm_forward_warp_kernel(const float* __restrict__ x,
                                             const float* __restrict__ w, uint32_t rows,
                                             uint32_t dim, float eps, float* __restrict__ y,
                                             uint16_t* __restrict__ y_bf16,
                                             float* __restrict__ x_copy) {
  const uint32_t lane = threadIdx.x % 32;
  WARP_ROWS(r, rows) {
    const float* xr = x + r * dim;
    float squares = 0;
    for (uint32_t i = lane; i < dim; i += 32) squares += xr[i] * xr[i];
    const float scale = inverse_rms<kScale>(warp_sum(squares), dim, eps);
    for (uint32_t i = lane; i < dim; i += 32) {
      if (x_copy) x_copy[r * dim + i] = xr[i];
      store(y, y_bf16, r * dim + i, xr[i] * scale * w[i]);
    }
  }
}

// The backward: one block a row, rows strided over the grid, dx_j = s (w_j dy_j - x_j s
// sum_i(w_i dy_i x_i) / dim) with s = 1 / rms(x) (into dx, dx_bf16 or both), and each
// block's share of dweight summed in shared memory by the thread that owns the column (no
// atomics), then written to partials [gridDim.x][dim] for rms_norm_partials_kernel.
__global__ void rms_norm_backward_rows_kernel(const float* __restrict__ x,
                                              const float* __restrict__ w,
                                              const float* __restrict__ dy, uint32_t rows,
                                              uint32_t dim, float eps, float* __restrict__ dx,
                                              uint16_t* __restrict__ dx_bf16, bool accumulate,
                                              float* __restrict__ partials) {
  extern __shared__ float dw_s[];  // [dim]
  __shared__ float sums[kWarps];
  for (uint32_t i = threadIdx.x; i < dim; i += blockDim.x) dw_s[i] = 0;
  __syncthreads();  // the loops below own the columns in another pattern
  const bool vector = dim % 4 == 0 && four_aligned(x, w, dy, dx, dx_bf16);
  const uint32_t quads = vector ? dim / 4 : 0;
  for (uint32_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const uint64_t row = uint64_t(r) * dim;
    const float *xr = x + row, *dyr = dy + row;
    float squares = 0, projection = 0;
    for (uint32_t q = threadIdx.x; q < quads; q += blockDim.x) {
      const float4 a = load4(xr, q), g = load4(dyr, q), c = load4(w, q);
      squares += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
      projection += c.x * g.x * a.x + c.y * g.y * a.y + c.z * g.z * a.z + c.w * g.w * a.w;
    }
    for (uint32_t i = 4 * quads + threadIdx.x; i < dim; i += blockDim.x) {
      squares += xr[i] * xr[i];
      projection += w[i] * dyr[i] * xr[i];
    }
    const float s = rsqrtf(block_sum<kWarps>(squares, sums) / float(dim) + eps);
    const float mean_projection = s * block_sum<kWarps>(projection, sums) / float(dim);
    // d(x_j) = s (w_j dy_j - x_j s mean_projection); d(w_j) += dy_j x_j s.
    const auto d = [&](float xv, float gv, float wv) {
      return s * (wv * gv - xv * s * mean_projection);
    };
    float* dxr = dx ? dx + row : nullptr;
    uint16_t* dxr_bf16 = dx_bf16 ? dx_bf16 + row : nullptr;
    for (uint32_t q = threadIdx.x; q < quads; q += blockDim.x) {
      const float4 a = load4(xr, q), g = load4(dyr, q), c = load4(w, q);
      float4 out{d(a.x, g.x, c.x), d(a.y, g.y, c.y), d(a.z, g.z, c.z), d(a.w, g.w, c.w)};
      if (accumulate) {
        const float4 old = load4(dxr, q);
        out = {old.x + out.x, old.y + out.y, old.z + out.z, old.w + out.w};
      }
      store4(dxr, dxr_bf16, q, out);
      float4& dw = reinterpret_cast<float4*>(dw_s)[q];
      dw = {dw.x + g.x * a.x * s, dw.y + g.y * a.y * s, dw.z + g.z * a.z * s, dw.w + g.w * a.w * s};
    }
    for (uint32_t i = 4 * quads + threadIdx.x; i < dim; i += blockDim.x) {
      const float out = d(xr[i], dyr[i], w[i]);
      store(dxr, dxr_bf16, i, accumulate ? dxr[i] + out : out);
      dw_s[i] += dyr[i] * xr[i] * s;
    }
  }
  __syncthreads();  // every owner's sums are in
  for (uint32_t i = threadIdx.x; i < dim; i += blockDim.x)
    partials[uint64_t(blockIdx.x) * dim + i] = dw_s[i];
}

// dweight[i] += the blocks' partials of column i in double, in a fixed order: a block takes
// 32 columns, its warp w every kWarps-th partial from w (one column a lane), then the warps'
// sums are added in warp order. (One thread a column looped over 512 partials serially.)
__global__ void rms_norm_partials_kernel(const float* __restrict__ partials, uint32_t blocks,
                                         uint32_t dim, float* __restrict__ dweight) {
  __shared__ double warp_sums[kWarps][32];
  const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const uint32_t i = blockIdx.x * 32 + lane;
  double sum = 0;
  if (i < dim)
    for (uint32_t b = warp; b < blocks; b += kWarps) sum += partials[uint64_t(b) * dim + i];
  warp_sums[warp][lane] = sum;
  __syncthreads();
  if (warp == 0 && i < dim) {
    double total = 0;
    for (int w = 0; w < kWarps; ++w) total += warp_sums[w][lane];
    dweight[i] += float(total);
  }
}

bool four_aligned_host(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <RmsNormScale kScale>
cudaError_t rms_norm_forward(const float* x, const float* weight, uint32_t rows, uint32_t dim,
                             float eps, float* y, cudaStream_t stream, uint16_t* y_bf16,
                             float* x_copy) {
  if (dim <= kWarpRowDim) {
    rms_norm_forward_warp_kernel<kScale>
        <<<grid_stride_blocks(uint64_t(rows) * 32, kThreads, 16), kThreads, 0, stream>>>(
            x, weight, rows, dim, eps, y, y_bf16, x_copy);
    return cudaGetLastError();
  }
  const bool cached = dim % 4 == 0 && dim <= kCachedRow && four_aligned_host(x) &&
                      four_aligned_host(weight) && four_aligned_host(y) &&
                      reinterpret_cast<uintptr_t>(y_bf16) % 8 == 0 && four_aligned_host(x_copy);
  if (cached)
    rms_norm_forward_kernel<kScale, true>
        <<<row_grid(rows), kThreads, 0, stream>>>(x, weight, rows, dim, eps, y, y_bf16, x_copy);
  else
    rms_norm_forward_kernel<kScale, false>
        <<<row_grid(rows), kThreads, 0, stream>>>(x, weight, rows, dim, eps, y, y_bf16, x_copy);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_rms_norm_forward(const float* x, const float* weight, uint32_t rows,
                                    uint32_t dim, float eps, float* y, cudaStream_t stream,
                                    uint16_t* y_bf16, float* x_copy, RmsNormScale scale) {
  if (scale == RmsNormScale::kRounded)
    return rms_norm_forward<RmsNormScale::kRounded>(x, weight, rows, dim, eps, y, stream, y_bf16,
                                                    x_copy);
  return rms_norm_forward<RmsNormScale::kFast>(x, weight, rows, dim, eps, y, stream, y_bf16,
                                               x_copy);
}

cudaError_t launch_rms_norm_backward_rows(const float* x, const float* weight, const float* dy,
                                          uint32_t rows, uint32_t dim, float eps, float* dx,
                                          bool accumulate, float* dweight, float* partials,
                                          cudaStream_t stream, uint16_t* dx_bf16) {
  if (rows == 0 || dim == 0) return cudaSuccess;
  if ((accumulate && !dx) || (!dx && !dx_bf16)) return cudaErrorInvalidValue;
  const size_t smem = size_t(dim) * sizeof(float);
  if (smem > 48 * 1024)
    if (cudaError_t e = cudaFuncSetAttribute(
            rms_norm_backward_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        e != cudaSuccess)
      return e;
  const uint32_t blocks = std::min(rows, kRmsNormBackwardBlocks);
  rms_norm_backward_rows_kernel<<<blocks, kThreads, smem, stream>>>(
      x, weight, dy, rows, dim, eps, dx, dx_bf16, accumulate, partials);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  rms_norm_partials_kernel<<<(dim + 31) / 32, kThreads, 0, stream>>>(partials, blocks, dim,
                                                                     dweight);
  return cudaGetLastError();
}

}  // namespace hsring::gpu
