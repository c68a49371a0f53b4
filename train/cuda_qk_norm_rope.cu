// Fused QK-norm + RoPE (train/cuda_qk_norm_rope.h). One warp a (row, head) "norm row": lane
// `lane` holds the rotation pairs (i, i + half) for i = lane + 32 k in registers, so x (and
// dy) are read once and y (or dx) written once, with no array between the norm and the
// rotation. The sums, products and rotations are written as in rms_norm_forward_warp_kernel
// and rope_apply_kernel (gpu/ops/rms_norm.cu, gpu/ops/rope.cu), whose results these must
// equal.
#include <cuda_runtime.h>

#include "gpu/bf16.cuh"
#include "gpu/block_reduce.cuh"
#include "gpu/launch_grid.h"
#include "train/cuda_qk_norm_rope.h"

namespace hsring::train {

namespace {

using gpu::load;
using gpu::store;
using gpu::warp_sum;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr uint32_t kMaxHeadDim = 256;

// As cuda_drafter_kernels.cu's grid_for: 16 blocks per SM, one warp per item.
unsigned grid_for_norm_rows(uint64_t norm_rows) {
  return gpu::grid_stride_blocks(norm_rows * 32, kThreads, 16);
}

#define NORM_ROWS(r, n)                                                              \
  for (uint64_t r = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; r < (n); \
       r += uint64_t(gridDim.x) * blockDim.x / 32)

// kPairs: the pairs a lane may hold (1, 2 or 4: half <= 32 * kPairs). Pair k is column
// i = lane + 32 k with its partner i + half, present when i < half; absent ones hold 0,
// which leaves the sums exact. Lo before hi then is each lane's columns in ascending order,
// the warp kernels' order of summation when half is a multiple of 32.
template <int kPairs, class TX>
__global__ void __launch_bounds__(kThreads)
    qk_norm_rope_forward_kernel(const TX* __restrict__ x, const float* __restrict__ w,
                                uint64_t norm_rows, uint32_t heads, uint32_t head_dim, float eps,
                                const float* __restrict__ cos, const float* __restrict__ sin,
                                float* __restrict__ y, uint16_t* __restrict__ y_bf16) {
  const uint32_t lane = threadIdx.x % 32, half = head_dim / 2;
  float w_lo[kPairs], w_hi[kPairs];
#pragma unroll
  for (int k = 0; k < kPairs; ++k) {
    const uint32_t i = lane + 32 * k;
    w_lo[k] = i < half ? w[i] : 0.0f;
    w_hi[k] = i < half ? w[i + half] : 0.0f;
  }
  NORM_ROWS(r, norm_rows) {
    const TX* xr = x + r * head_dim;
    float lo[kPairs], hi[kPairs];
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      const uint32_t i = lane + 32 * k;
      lo[k] = i < half ? load(xr, i) : 0.0f;
      hi[k] = i < half ? load(xr, i + half) : 0.0f;
    }
    float squares = 0;
#pragma unroll
    for (int k = 0; k < kPairs; ++k) squares += lo[k] * lo[k];
#pragma unroll
    for (int k = 0; k < kPairs; ++k) squares += hi[k] * hi[k];
    const float scale = rsqrtf(warp_sum(squares) / float(head_dim) + eps);

    const uint64_t angles = (r / heads) * half;  // the token's cos/sin row
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      const uint32_t i = lane + 32 * k;
      if (i >= half) continue;
      const float a = lo[k] * scale * w_lo[k], b = hi[k] * scale * w_hi[k];
      const float c = cos[angles + i], s = sin[angles + i];
      const float y_lo = a * c - b * s, y_hi = b * c + a * s;
      store(y, y_bf16, r * head_dim + i, y_lo);
      store(y, y_bf16, r * head_dim + i + half, y_hi);
    }
  }
}

// g = inverse-RoPE(dy), then RMSNorm's dx from g (launch_rms_norm_backward_rows'):
// dx_j = s (w_j g_j - x_j s mean_projection), mean_projection = s sum(w g x) / dim. Each
// lane sums g x s of its columns in double over its warp's norm rows; the block's warps
// combine theirs in shared memory, then one float atomic a column.
template <int kPairs, class TX>
__global__ void __launch_bounds__(kThreads)
    qk_norm_rope_backward_kernel(const TX* __restrict__ x, const float* __restrict__ w,
                                 const float* __restrict__ dy, uint64_t norm_rows, uint32_t heads,
                                 uint32_t head_dim, float eps, const float* __restrict__ cos,
                                 const float* __restrict__ sin, float* __restrict__ dx,
                                 uint16_t* __restrict__ dx_bf16, uint64_t dx_stride,
                                 float* __restrict__ dweight) {
  // [warp][slot]: slot k * 32 + lane is lo column lane + 32 k, (kPairs + k) * 32 + lane its
  // partner.
  __shared__ double warp_dweight[kWarps][2 * kPairs * 32];
  const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32, half = head_dim / 2;
  float w_lo[kPairs], w_hi[kPairs];
  double dw_lo[kPairs], dw_hi[kPairs];
#pragma unroll
  for (int k = 0; k < kPairs; ++k) {
    const uint32_t i = lane + 32 * k;
    w_lo[k] = i < half ? w[i] : 0.0f;
    w_hi[k] = i < half ? w[i + half] : 0.0f;
    dw_lo[k] = dw_hi[k] = 0.0;
  }
  NORM_ROWS(r, norm_rows) {
    const TX* xr = x + r * head_dim;
    const float* dyr = dy + r * head_dim;
    const uint64_t token = r / heads, angles = token * half;
    const uint64_t out = token * dx_stride + (r - token * heads) * head_dim;  // dx's row r
    float x_lo[kPairs], x_hi[kPairs], g_lo[kPairs], g_hi[kPairs];
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      const uint32_t i = lane + 32 * k;
      x_lo[k] = x_hi[k] = g_lo[k] = g_hi[k] = 0.0f;
      if (i >= half) continue;
      x_lo[k] = load(xr, i);
      x_hi[k] = load(xr, i + half);
      // rope_apply_kernel's inverse (its sin negated), in its words.
      const float c = cos[angles + i], s = -sin[angles + i], a = dyr[i], b = dyr[i + half];
      g_lo[k] = a * c - b * s;
      g_hi[k] = b * c + a * s;
    }
    float squares = 0, projection = 0;
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      squares += x_lo[k] * x_lo[k];
      projection += w_lo[k] * g_lo[k] * x_lo[k];
    }
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      squares += x_hi[k] * x_hi[k];
      projection += w_hi[k] * g_hi[k] * x_hi[k];
    }
    const float s = rsqrtf(warp_sum(squares) / float(head_dim) + eps);
    const float mean_projection = s * warp_sum(projection) / float(head_dim);

#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      const uint32_t i = lane + 32 * k;
      if (i >= half) continue;
      const float d_lo = s * (w_lo[k] * g_lo[k] - x_lo[k] * s * mean_projection);
      const float d_hi = s * (w_hi[k] * g_hi[k] - x_hi[k] * s * mean_projection);
      store(dx, dx_bf16, out + i, d_lo);
      store(dx, dx_bf16, out + i + half, d_hi);
      dw_lo[k] += double(g_lo[k]) * double(x_lo[k]) * double(s);
      dw_hi[k] += double(g_hi[k]) * double(x_hi[k]) * double(s);
    }
  }

  // Every thread reaches here (the loop above is per warp, with no early exit).
#pragma unroll
  for (int k = 0; k < kPairs; ++k) {
    warp_dweight[warp][k * 32 + lane] = dw_lo[k];
    warp_dweight[warp][(kPairs + k) * 32 + lane] = dw_hi[k];
  }
  __syncthreads();
  for (uint32_t col = threadIdx.x; col < head_dim; col += blockDim.x) {
    const uint32_t slot = col < half ? col : kPairs * 32 + (col - half);
    double sum = 0;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) sum += warp_dweight[v][slot];
    atomicAdd(dweight + col, float(sum));
  }
}

bool head_dim_supported(uint32_t head_dim) {
  return head_dim >= 2 && head_dim <= kMaxHeadDim && head_dim % 2 == 0;
}

template <class TX>
cudaError_t forward(const TX* x, const float* w, uint32_t rows, uint32_t heads, uint32_t head_dim,
                    float eps, const float* cos, const float* sin, float* y, cudaStream_t stream,
                    uint16_t* y_bf16) {
  if (!head_dim_supported(head_dim) || (y == nullptr && y_bf16 == nullptr))
    return cudaErrorInvalidValue;
  const uint64_t norm_rows = uint64_t(rows) * heads;
  if (norm_rows == 0) return cudaSuccess;
  const uint32_t half = head_dim / 2;
  auto* kernel = half <= 32   ? qk_norm_rope_forward_kernel<1, TX>
                 : half <= 64 ? qk_norm_rope_forward_kernel<2, TX>
                              : qk_norm_rope_forward_kernel<4, TX>;
  kernel<<<grid_for_norm_rows(norm_rows), kThreads, 0, stream>>>(x, w, norm_rows, heads, head_dim,
                                                                 eps, cos, sin, y, y_bf16);
  return cudaGetLastError();
}

template <class TX>
cudaError_t backward(const TX* x, const float* w, const float* dy, uint32_t rows, uint32_t heads,
                     uint32_t head_dim, float eps, const float* cos, const float* sin, float* dx,
                     uint16_t* dx_bf16, float* dweight, cudaStream_t stream, uint32_t dx_stride) {
  if (!head_dim_supported(head_dim) || (dx == nullptr && dx_bf16 == nullptr))
    return cudaErrorInvalidValue;
  if (dx_stride == 0) dx_stride = heads * head_dim;
  if (dx_stride < heads * head_dim) return cudaErrorInvalidValue;
  const uint64_t norm_rows = uint64_t(rows) * heads;
  // Not even a launch: a block with no rows would still add its zeros to dweight.
  if (norm_rows == 0) return cudaSuccess;
  const uint32_t half = head_dim / 2;
  auto* kernel = half <= 32   ? qk_norm_rope_backward_kernel<1, TX>
                 : half <= 64 ? qk_norm_rope_backward_kernel<2, TX>
                              : qk_norm_rope_backward_kernel<4, TX>;
  kernel<<<grid_for_norm_rows(norm_rows), kThreads, 0, stream>>>(
      x, w, dy, norm_rows, heads, head_dim, eps, cos, sin, dx, dx_bf16, dx_stride, dweight);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_qk_norm_rope_forward(const float* x, const float* w, uint32_t rows,
                                        uint32_t heads, uint32_t head_dim, float eps,
                                        const float* cos, const float* sin, float* y,
                                        cudaStream_t stream, uint16_t* y_bf16) {
  return forward(x, w, rows, heads, head_dim, eps, cos, sin, y, stream, y_bf16);
}

cudaError_t launch_qk_norm_rope_forward(const uint16_t* x, const float* w, uint32_t rows,
                                        uint32_t heads, uint32_t head_dim, float eps,
                                        const float* cos, const float* sin, float* y,
                                        cudaStream_t stream, uint16_t* y_bf16) {
  return forward(x, w, rows, heads, head_dim, eps, cos, sin, y, stream, y_bf16);
}

cudaError_t launch_qk_norm_rope_backward(const float* x, const float* w, const float* dy,
                                         uint32_t rows, uint32_t heads, uint32_t head_dim,
                                         float eps, const float* cos, const float* sin, float* dx,
                                         uint16_t* dx_bf16, float* dweight, cudaStream_t stream,
                                         uint32_t dx_stride) {
  return backward(x, w, dy, rows, heads, head_dim, eps, cos, sin, dx, dx_bf16, dweight, stream,
                  dx_stride);
}

cudaError_t launch_qk_norm_rope_backward(const uint16_t* x, const float* w, const float* dy,
                                         uint32_t rows, uint32_t heads, uint32_t head_dim,
                                         float eps, const float* cos, const float* sin, float* dx,
                                         uint16_t* dx_bf16, float* dweight, cudaStream_t stream,
                                         uint32_t dx_stride) {
  return backward(x, w, dy, rows, heads, head_dim, eps, cos, sin, dx, dx_bf16, dweight, stream,
                  dx_stride);
}

}  // namespace hsring::train
