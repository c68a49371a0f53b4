// Element-wise, per-row and optimizer kernels of the drafter's training step. The attention
// kernels are in cuda_drafter_attention.cu.
#include <cuda_runtime.h>

#include <algorithm>

#include "gpu/launch_grid.h"
#include "train/bf16_round.cuh"
#include "train/cuda_drafter_kernels.h"

namespace hsring::train::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// 16 blocks per SM (and 32 for the attention): the step is 2% slower with 8 for both
// (drafter_step_bench: 386 ms against 380 ms, bench/RESULTS.md).
unsigned grid_for(uint64_t work_items) { return gpu::grid_stride_blocks(work_items, kThreads, 16); }

// One block per row, up to CUDA's grid limit (kernels loop over the rest).
unsigned row_grid(uint32_t rows) { return rows < 65535u ? (rows == 0 ? 1 : rows) : 65535u; }

// AdamWStep's factors as the kernel uses them, in float.
struct AdamWFactors {
  float lr, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, keep, clip, inv_correction1,
      inv_correction2;
};

#define GRID_STRIDE(i, n)                                                     \
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += uint64_t(gridDim.x) * blockDim.x)

__device__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_xor_sync(0xFFFFFFFFu, value, offset);
  return value;
}

// Sum over the block; every thread gets the total. The leading barrier lets a caller use
// it twice in a row with the same `partials`.
__device__ float block_sum(float value, float* partials) {
  value = warp_sum(value);
  __syncthreads();
  if (threadIdx.x % 32 == 0) partials[threadIdx.x / 32] = value;
  __syncthreads();
  float total = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += partials[w];
  return total;
}

// Element-wise kernels are bandwidth-bound: four values a thread where the arrays allow it
// (quad(q) for values 4q .. 4q + 3), one at a time for the rest (one(i)).
template <class Quad, class One>
__device__ void quads_then_rest(uint64_t n, bool aligned, Quad quad, One one) {
  const uint64_t quads = aligned ? n / 4 : 0;
  GRID_STRIDE(q, quads) quad(q);
  GRID_STRIDE(r, n - 4 * quads) one(4 * quads + r);
}

__global__ void bf16_to_float_kernel(const uint16_t* __restrict__ in, uint64_t n,
                                     float* __restrict__ out) {
  GRID_STRIDE(i, n) out[i] = widen(in[i]);
}

__global__ void float_to_bf16_kernel(const float* __restrict__ in, uint64_t n,
                                     uint16_t* __restrict__ out) {
  quads_then_rest(
      n, four_aligned(in, out), [&](uint64_t q) { store4(nullptr, out, q, load4(in, q)); },
      [&](uint64_t i) { out[i] = round_to_bf16(in[i]); });
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
        out[row * out_stride + (i - row * cols)] = round_to_bf16(in[i]);
      });
}

__global__ void doc_bounds_kernel(const int32_t* __restrict__ offsets, uint32_t docs, uint32_t rows,
                                  int32_t* __restrict__ start, int32_t* __restrict__ end) {
  GRID_STRIDE(t, rows) {
    // The last document whose offset is <= t: binary search over cu_seqlens.
    uint32_t lo = 0, hi = docs;  // offsets[lo] <= t < offsets[hi]
    while (hi - lo > 1) {
      const uint32_t mid = (lo + hi) / 2;
      if (uint64_t(offsets[mid]) <= t)
        lo = mid;
      else
        hi = mid;
    }
    start[t] = offsets[lo];
    end[t] = offsets[lo + 1];
  }
}

// One block a row, four values a load where the arrays allow it. x_copy, when given,
// receives the row as it is: the residual that the product after the norm adds to.
__global__ void rms_norm_forward_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                        uint32_t rows, uint32_t dim, float eps,
                                        float* __restrict__ y, uint16_t* __restrict__ y_bf16,
                                        float* __restrict__ x_copy) {
  __shared__ float partials[kWarps];
  const bool vector = dim % 4 == 0 && four_aligned(x, w, y, y_bf16, x_copy);
  const uint32_t quads = vector ? dim / 4 : 0;
  for (uint32_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const uint64_t row = uint64_t(r) * dim;
    const float* xr = x + row;
    float squares = 0;
    for (uint32_t q = threadIdx.x; q < quads; q += blockDim.x) {
      const float4 v = load4(xr, q);
      squares += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    for (uint32_t i = 4 * quads + threadIdx.x; i < dim; i += blockDim.x) squares += xr[i] * xr[i];
    const float scale = rsqrtf(block_sum(squares, partials) / float(dim) + eps);
    float* yr = y ? y + row : nullptr;
    uint16_t* yr_bf16 = y_bf16 ? y_bf16 + row : nullptr;
    for (uint32_t q = threadIdx.x; q < quads; q += blockDim.x) {
      const float4 v = load4(xr, q), g = load4(w, q);
      if (x_copy) store4(x_copy + row, nullptr, q, v);
      store4(yr, yr_bf16, q,
             float4{v.x * scale * g.x, v.y * scale * g.y, v.z * scale * g.z, v.w * scale * g.w});
    }
    for (uint32_t i = 4 * quads + threadIdx.x; i < dim; i += blockDim.x) {
      if (x_copy) x_copy[row + i] = xr[i];
      store(y, y_bf16, row + i, xr[i] * scale * w[i]);
    }
  }
}

// The per-head norms (QK-norm: dim = head_dim, hundreds of thousands of rows) with one warp
// a row instead of a 256-thread block: a block of barriers for 128 values made these
// passes cost more than the products around them.
constexpr uint32_t kWarpRowDim = 256;

#define WARP_ROWS(r, rows)                                                              \
  for (uint64_t r = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; r < (rows); \
       r += uint64_t(gridDim.x) * blockDim.x / 32)

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
    const float scale = rsqrtf(warp_sum(squares) / float(dim) + eps);
    for (uint32_t i = lane; i < dim; i += 32) {
      if (x_copy) x_copy[r * dim + i] = xr[i];
      store(y, y_bf16, r * dim + i, xr[i] * scale * w[i]);
    }
  }
}

// RMSNorm's backward in one pass over x and dy: one block a row, rows strided over the grid,
// dx_j = s (w_j dy_j - x_j s sum_i(w_i dy_i x_i) / dim) with s = 1 / rms(x) (into dx,
// dx_bf16 or both), and each block's share of dweight summed in shared memory by the thread
// that owns the column (no atomics), then written to partials [gridDim.x][dim] for
// rms_norm_partials_kernel.
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
    const float s = rsqrtf(block_sum(squares, sums) / float(dim) + eps);
    const float mean_projection = s * block_sum(projection, sums) / float(dim);
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

__global__ void rope_apply_kernel(float* __restrict__ x, uint32_t rows, uint32_t heads,
                                  uint32_t head_dim, const float* __restrict__ cos,
                                  const float* __restrict__ sin, float direction) {
  const uint32_t half = head_dim / 2;
  const uint64_t pairs = uint64_t(rows) * heads * half;
  GRID_STRIDE(e, pairs) {
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

__device__ float sigmoid(float g) { return 1.0f / (1.0f + __expf(-g)); }

__device__ float silu_times(float g, float u) { return g * sigmoid(g) * u; }
// d(silu(g) u)/dg and /du times d: silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
__device__ float2 silu_times_backward(float g, float u, float d) {
  const float sig = sigmoid(g);
  return {d * u * sig * (1.0f + g * (1.0f - sig)), d * g * sig};
}

// Inputs T: float, or uint16_t holding bf16.
template <class T>
__global__ void swiglu_forward_kernel(const T* __restrict__ gate, const T* __restrict__ up,
                                      uint64_t n, float* __restrict__ out,
                                      uint16_t* __restrict__ out_bf16) {
  quads_then_rest(
      n, four_aligned(gate, up, out, out_bf16),
      [&](uint64_t q) {
        const float4 g = load4(gate, q), u = load4(up, q);
        store4(out, out_bf16, q,
               {silu_times(g.x, u.x), silu_times(g.y, u.y), silu_times(g.z, u.z),
                silu_times(g.w, u.w)});
      },
      [&](uint64_t i) { store(out, out_bf16, i, silu_times(load(gate, i), load(up, i))); });
}

template <class T>
__global__ void swiglu_backward_kernel(const T* __restrict__ gate, const T* __restrict__ up,
                                       const T* __restrict__ dout, uint64_t n,
                                       float* __restrict__ dgate, float* __restrict__ dup,
                                       uint16_t* __restrict__ dgate_bf16,
                                       uint16_t* __restrict__ dup_bf16) {
  quads_then_rest(
      n, four_aligned(gate, up, dout, dgate, dup, dgate_bf16, dup_bf16),
      [&](uint64_t q) {
        const float4 g = load4(gate, q), u = load4(up, q), d = load4(dout, q);
        const float2 x = silu_times_backward(g.x, u.x, d.x), y = silu_times_backward(g.y, u.y, d.y),
                     z = silu_times_backward(g.z, u.z, d.z), w = silu_times_backward(g.w, u.w, d.w);
        store4(dgate, dgate_bf16, q, {x.x, y.x, z.x, w.x});
        store4(dup, dup_bf16, q, {x.y, y.y, z.y, w.y});
      },
      [&](uint64_t i) {
        const float2 grads = silu_times_backward(load(gate, i), load(up, i), load(dout, i));
        store(dgate, dgate_bf16, i, grads.x);
        store(dup, dup_bf16, i, grads.y);
      });
}

__global__ void embedding_forward_kernel(const float* __restrict__ table,
                                         const int32_t* __restrict__ tokens, uint32_t rows,
                                         uint32_t dim, float* __restrict__ y) {
  GRID_STRIDE(e, uint64_t(rows) * dim) {
    const uint64_t r = e / dim;
    y[e] += table[uint64_t(tokens[r]) * dim + (e - r * dim)];
  }
}

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

// One thread a column, one block a chunk of the rows (blockIdx.y): coalesced along a row.
template <class T>
__global__ void sum_rows_chunks_kernel(const T* __restrict__ x, const int32_t* __restrict__ index,
                                       uint32_t n, uint32_t cols, float* __restrict__ partials) {
  const uint32_t c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const uint32_t per = (n + gridDim.y - 1) / gridDim.y, begin = blockIdx.y * per;
  const uint32_t end = min(n, begin + per);
  float sum = 0;
  for (uint32_t i = begin; i < end; ++i) sum += load(x, uint64_t(index[i]) * cols + c);
  partials[uint64_t(blockIdx.y) * cols + c] = sum;
}

__global__ void sum_rows_finish_kernel(const float* __restrict__ partials, uint32_t cols,
                                       float* __restrict__ y, uint16_t* __restrict__ y_bf16) {
  GRID_STRIDE(c, cols) {
    float sum = 0;
    for (uint32_t k = 0; k < kSumRowChunks; ++k) sum += partials[k * uint64_t(cols) + c];
    store(y, y_bf16, c, sum);
  }
}

template <class T>
cudaError_t sum_rows_launch(const T* x, const int32_t* index, uint32_t n, uint32_t cols,
                            float* partials, float* y, uint16_t* y_bf16, cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  const dim3 grid((cols + kThreads - 1) / kThreads, kSumRowChunks);
  sum_rows_chunks_kernel<<<grid, kThreads, 0, stream>>>(x, index, n, cols, partials);
  sum_rows_finish_kernel<<<grid_for(cols), kThreads, 0, stream>>>(partials, cols, y, y_bf16);
  return cudaGetLastError();
}

template <class T>
cudaError_t gather_rows_launch(const T* table, const int32_t* index, uint32_t rows, uint32_t dim,
                               float* y, cudaStream_t stream, uint16_t* y_bf16,
                               uint32_t table_stride) {
  if (table_stride == 0) table_stride = dim;
  if (table_stride < dim) return cudaErrorInvalidValue;
  if (rows == 0 || dim == 0) return cudaSuccess;
  const dim3 grid((dim / 4 + kThreads) / kThreads, std::min(rows, 65535u));
  gather_rows_kernel<<<grid, kThreads, 0, stream>>>(table, index, rows, dim, table_stride, y,
                                                    y_bf16);
  return cudaGetLastError();
}

__global__ void embedding_backward_kernel(const int32_t* __restrict__ tokens,
                                          const float* __restrict__ dy, uint32_t rows, uint32_t dim,
                                          float* __restrict__ dtable) {
  GRID_STRIDE(e, uint64_t(rows) * dim) {
    const uint64_t r = e / dim;
    atomicAdd(dtable + uint64_t(tokens[r]) * dim + (e - r * dim), dy[e]);
  }
}

__global__ void add_kernel(float* __restrict__ a, const float* __restrict__ b, uint64_t n) {
  GRID_STRIDE(i, n) a[i] += b[i];
}

__global__ void scale_kernel(float* __restrict__ x, uint64_t n, float factor) {
  GRID_STRIDE(i, n) x[i] *= factor;
}

// A row's running softmax statistics: the largest logit, its first index and the sum of
// exp(logit - max) over the logits seen.
struct SoftmaxStats {
  float max;
  uint32_t argmax;
  float sum;
};

__device__ void absorb(SoftmaxStats& s, float x, uint32_t i) {
  if (x > s.max) {  // NaN never wins; the first of equal maxima stays (indices rise)
    s.sum = s.sum * __expf(s.max - x) + 1.0f;
    s.max = x;
    s.argmax = i;
  } else if (x != -INFINITY) {  // adds nothing, and would form exp(-inf - -inf) at the start
    s.sum += __expf(x - s.max);
  }
}

__device__ SoftmaxStats merge(SoftmaxStats a, SoftmaxStats b) {
  const bool b_wins = b.max > a.max || (b.max == a.max && b.argmax < a.argmax);
  const SoftmaxStats& top = b_wins ? b : a;
  const SoftmaxStats& other = b_wins ? a : b;
  // An empty side (max -inf, sum 0) adds nothing, and exp(-inf - -inf) is never formed.
  const float other_sum = other.sum == 0.0f ? 0.0f : other.sum * __expf(other.max - top.max);
  return {top.max, top.argmax, top.sum + other_sum};
}

__device__ SoftmaxStats warp_merge(SoftmaxStats s) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const SoftmaxStats other{__shfl_xor_sync(0xFFFFFFFFu, s.max, offset),
                             __shfl_xor_sync(0xFFFFFFFFu, s.argmax, offset),
                             __shfl_xor_sync(0xFFFFFFFFu, s.sum, offset)};
    s = merge(s, other);
  }
  return s;
}

// One block per row, two passes over its logits: the max, first argmax and sum of
// exponentials together (online, as flash attention's softmax), then the gradient, in place
// and in the logits' own precision (fp32, or bf16 as the bf16 head product writes them).
// Bandwidth-bound: eight logits a thread per step where the rows are 16-byte aligned (one
// 16-byte load in bf16, whose four-value loads left too few bytes in flight), the same
// values to the same threads in both precisions, so that their sums agree bit for bit.
template <class T>
__global__ void cross_entropy_kernel(T* __restrict__ logits, const int32_t* __restrict__ labels,
                                     uint32_t rows, uint32_t vocab, float grad_scale, bool backward,
                                     float* __restrict__ row_loss, int32_t* __restrict__ row_agreed,
                                     const float* __restrict__ row_weight) {
  __shared__ SoftmaxStats warp_stats[kWarps];
  __shared__ float row_lse;
  const bool vector = vocab % 8 == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0;
  const uint32_t groups = vector ? vocab / 8 : 0;
  for (uint32_t r = blockIdx.x; r < rows; r += gridDim.x) {
    T* x = logits + uint64_t(r) * vocab;
    const int32_t label = labels[r];
    if (label < 0) {
      if (backward)
        for (uint32_t i = threadIdx.x; i < vocab; i += blockDim.x) x[i] = T(0);  // bf16 +0 too
      if (threadIdx.x == 0) {
        row_loss[r] = 0.0f;
        row_agreed[r] = 0;
      }
      continue;
    }
    SoftmaxStats stats{-INFINITY, 0xFFFFFFFFu, 0.0f};
#pragma unroll 2
    for (uint32_t g = threadIdx.x; g < groups; g += blockDim.x) {
      float v[8];
      load8(x, g, v);
#pragma unroll
      for (int k = 0; k < 8; ++k) absorb(stats, v[k], 8 * g + k);
    }
    for (uint32_t i = 8 * groups + threadIdx.x; i < vocab; i += blockDim.x)
      absorb(stats, load(x, i), i);
    stats = warp_merge(stats);
    if (threadIdx.x % 32 == 0) warp_stats[threadIdx.x / 32] = stats;
    __syncthreads();
    if (threadIdx.x == 0) {
      SoftmaxStats total = warp_stats[0];
      for (int w = 1; w < kWarps; ++w) total = merge(total, warp_stats[w]);
      const float lse = total.max + logf(total.sum);
      row_lse = lse;
      row_loss[r] = lse - load(x, label);
      row_agreed[r] = total.argmax == uint32_t(label) ? 1 : 0;
    }
    __syncthreads();  // row_lse is known, and x[label] was read before the gradient overwrites it
    if (backward) {
      // scale * (softmax - onehot), the label's subtraction kept apart from the product so
      // that both precisions round the same fp32 value once.
      const float lse = row_lse;
      const float scale = row_weight ? grad_scale * row_weight[r] : grad_scale;
      const auto grad = [&](float logit, uint32_t i) {
        const float p = scale * __expf(logit - lse);
        return i == uint32_t(label) ? __fsub_rn(p, scale) : p;
      };
#pragma unroll 2
      for (uint32_t g = threadIdx.x; g < groups; g += blockDim.x) {
        float v[8];
        load8(x, g, v);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = grad(v[k], 8 * g + k);
        store8(x, g, v);
      }
      for (uint32_t i = 8 * groups + threadIdx.x; i < vocab; i += blockDim.x)
        store(x, i, grad(load(x, i), i));
    }
    __syncthreads();  // warp_stats and row_lse are reused by the next row
  }
}

template <class T>
__global__ void sum_squares_kernel(const T* __restrict__ x, uint64_t n,
                                   double* __restrict__ partials) {
  __shared__ double warp_totals[kWarps];
  double sum = 0;
  const auto square = [](float value) { return double(value) * double(value); };
  quads_then_rest(
      n, four_aligned(x),
      [&](uint64_t q) {
        const float4 v = load4(x, q);
        sum += (square(v.x) + square(v.y)) + (square(v.z) + square(v.w));
      },
      [&](uint64_t i) { sum += square(load(x, i)); });
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, offset);
  if (threadIdx.x % 32 == 0) warp_totals[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (int w = 0; w < kWarps; ++w) total += warp_totals[w];
    partials[blockIdx.x] = total;
  }
}

// In float: double arithmetic (division and sqrt above all) made this kernel compute-bound
// at 109 ms for 900 M parameters on an H200; in float it streams at memory speed.
// Every rounding is spelled out (no contraction left to the compiler), so that the update
// has the same bits in each instantiation of adamw_kernel: fp32 or bf16 gradients.
__device__ float adamw_update(float& p, float& m, float& v, float grad, const AdamWFactors& f) {
  const float g = __fmul_rn(grad, f.clip);
  m = __fmaf_rn(f.beta1, m, __fmul_rn(f.one_minus_beta1, g));
  v = __fmaf_rn(f.beta2, v, __fmul_rn(__fmul_rn(f.one_minus_beta2, g), g));
  const float update = __fdiv_rn(__fmul_rn(m, f.inv_correction1),
                                 __fadd_rn(__fsqrt_rn(__fmul_rn(v, f.inv_correction2)), f.eps));
  p = __fmaf_rn(-f.lr, update, __fmul_rn(p, f.keep));
  return p;
}

// Four parameters a thread where the arrays allow it (the update moves 28 bytes a parameter
// and is bandwidth-bound); with params_bf16, the new weights' bf16 copy is written in the
// same pass instead of a rounding pass of its own before the next step's products.
// G: the gradients' type, float or bf16 (uint16_t: the bf16 products' weight gradients).
template <class G>
__global__ void adamw_kernel(float* __restrict__ params, const G* __restrict__ grads,
                             float* __restrict__ m, float* __restrict__ v, uint64_t n,
                             AdamWFactors f, uint16_t* __restrict__ params_bf16) {
  const bool vector = four_aligned(params, m, v, params_bf16) && four_aligned(grads);
  const uint64_t quads = vector ? n / 4 : 0;
  GRID_STRIDE(q, quads) {
    float4 p = reinterpret_cast<float4*>(params)[q];
    float4 mi = reinterpret_cast<float4*>(m)[q];
    float4 vi = reinterpret_cast<float4*>(v)[q];
    const float4 g = load4(grads, q);
    adamw_update(p.x, mi.x, vi.x, g.x, f);
    adamw_update(p.y, mi.y, vi.y, g.y, f);
    adamw_update(p.z, mi.z, vi.z, g.z, f);
    adamw_update(p.w, mi.w, vi.w, g.w, f);
    reinterpret_cast<float4*>(params)[q] = p;
    reinterpret_cast<float4*>(m)[q] = mi;
    reinterpret_cast<float4*>(v)[q] = vi;
    if (params_bf16)
      reinterpret_cast<uint2*>(params_bf16)[q] =
          uint2{uint32_t(round_to_bf16(p.x)) | (uint32_t(round_to_bf16(p.y)) << 16),
                uint32_t(round_to_bf16(p.z)) | (uint32_t(round_to_bf16(p.w)) << 16)};
  }
  GRID_STRIDE(j, n - 4 * quads) {
    const uint64_t i = 4 * quads + j;
    const float p = adamw_update(params[i], m[i], v[i], load(grads, i), f);
    if (params_bf16) params_bf16[i] = round_to_bf16(p);
  }
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

cudaError_t launch_doc_bounds(const int32_t* doc_offsets, uint32_t docs, uint32_t rows,
                              int32_t* start, int32_t* end, cudaStream_t stream) {
  doc_bounds_kernel<<<grid_for(rows), kThreads, 0, stream>>>(doc_offsets, docs, rows, start, end);
  return cudaGetLastError();
}

cudaError_t launch_rms_norm_forward(const float* x, const float* weight, uint32_t rows,
                                    uint32_t dim, float eps, float* y, cudaStream_t stream,
                                    uint16_t* y_bf16, float* x_copy) {
  if (dim <= kWarpRowDim)
    rms_norm_forward_warp_kernel<<<grid_for(uint64_t(rows) * 32), kThreads, 0, stream>>>(
        x, weight, rows, dim, eps, y, y_bf16, x_copy);
  else
    rms_norm_forward_kernel<<<row_grid(rows), kThreads, 0, stream>>>(x, weight, rows, dim, eps, y,
                                                                     y_bf16, x_copy);
  return cudaGetLastError();
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

cudaError_t launch_rope_apply(float* x, uint32_t rows, uint32_t heads, uint32_t head_dim,
                              const float* cos, const float* sin, bool inverse,
                              cudaStream_t stream) {
  const uint64_t pairs = uint64_t(rows) * heads * (head_dim / 2);
  rope_apply_kernel<<<grid_for(pairs), kThreads, 0, stream>>>(x, rows, heads, head_dim, cos, sin,
                                                              inverse ? -1.0f : 1.0f);
  return cudaGetLastError();
}

namespace {

// The SwiGLU launches for inputs T (float or bf16): a thread per four values.
template <class T>
cudaError_t swiglu_forward(const T* gate, const T* up, size_t n, float* out, cudaStream_t stream,
                           uint16_t* out_bf16) {
  swiglu_forward_kernel<<<grid_for(n / 4 + 1), kThreads, 0, stream>>>(gate, up, n, out, out_bf16);
  return cudaGetLastError();
}
template <class T>
cudaError_t swiglu_backward(const T* gate, const T* up, const T* dout, size_t n, float* dgate,
                            float* dup, cudaStream_t stream, uint16_t* dgate_bf16,
                            uint16_t* dup_bf16) {
  swiglu_backward_kernel<<<grid_for(n / 4 + 1), kThreads, 0, stream>>>(gate, up, dout, n, dgate,
                                                                       dup, dgate_bf16, dup_bf16);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_swiglu_forward(const float* gate, const float* up, size_t n, float* out,
                                  cudaStream_t stream, uint16_t* out_bf16) {
  return swiglu_forward(gate, up, n, out, stream, out_bf16);
}
cudaError_t launch_swiglu_forward(const uint16_t* gate, const uint16_t* up, size_t n, float* out,
                                  cudaStream_t stream, uint16_t* out_bf16) {
  return swiglu_forward(gate, up, n, out, stream, out_bf16);
}

cudaError_t launch_swiglu_backward(const float* gate, const float* up, const float* dout, size_t n,
                                   float* dgate, float* dup, cudaStream_t stream,
                                   uint16_t* dgate_bf16, uint16_t* dup_bf16) {
  return swiglu_backward(gate, up, dout, n, dgate, dup, stream, dgate_bf16, dup_bf16);
}
cudaError_t launch_swiglu_backward(const uint16_t* gate, const uint16_t* up, const uint16_t* dout,
                                   size_t n, float* dgate, float* dup, cudaStream_t stream,
                                   uint16_t* dgate_bf16, uint16_t* dup_bf16) {
  return swiglu_backward(gate, up, dout, n, dgate, dup, stream, dgate_bf16, dup_bf16);
}

cudaError_t launch_embedding_forward(const float* table, const int32_t* tokens, uint32_t rows,
                                     uint32_t dim, float* y, cudaStream_t stream) {
  embedding_forward_kernel<<<grid_for(uint64_t(rows) * dim), kThreads, 0, stream>>>(table, tokens,
                                                                                    rows, dim, y);
  return cudaGetLastError();
}

cudaError_t launch_gather_rows(const float* table, const int32_t* index, uint32_t rows,
                               uint32_t dim, float* y, cudaStream_t stream, uint16_t* y_bf16,
                               uint32_t table_stride) {
  return gather_rows_launch(table, index, rows, dim, y, stream, y_bf16, table_stride);
}

cudaError_t launch_gather_rows(const uint16_t* table, const int32_t* index, uint32_t rows,
                               uint32_t dim, float* y, cudaStream_t stream, uint16_t* y_bf16,
                               uint32_t table_stride) {
  return gather_rows_launch(table, index, rows, dim, y, stream, y_bf16, table_stride);
}

cudaError_t launch_sum_rows(const float* x, const int32_t* index, uint32_t n, uint32_t cols,
                            float* partials, float* y, uint16_t* y_bf16, cudaStream_t stream) {
  return sum_rows_launch(x, index, n, cols, partials, y, y_bf16, stream);
}

cudaError_t launch_sum_rows(const uint16_t* x, const int32_t* index, uint32_t n, uint32_t cols,
                            float* partials, float* y, uint16_t* y_bf16, cudaStream_t stream) {
  return sum_rows_launch(x, index, n, cols, partials, y, y_bf16, stream);
}

cudaError_t launch_embedding_backward(const int32_t* tokens, const float* dy, uint32_t rows,
                                      uint32_t dim, float* dtable, cudaStream_t stream) {
  embedding_backward_kernel<<<grid_for(uint64_t(rows) * dim), kThreads, 0, stream>>>(
      tokens, dy, rows, dim, dtable);
  return cudaGetLastError();
}

cudaError_t launch_add(float* a, const float* b, size_t n, cudaStream_t stream) {
  add_kernel<<<grid_for(n), kThreads, 0, stream>>>(a, b, n);
  return cudaGetLastError();
}

cudaError_t launch_scale(float* x, size_t n, float factor, cudaStream_t stream) {
  scale_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n, factor);
  return cudaGetLastError();
}

namespace {
template <class T>
cudaError_t cross_entropy_launch(T* logits, const int32_t* labels, uint32_t rows, uint32_t vocab,
                                 float grad_scale, bool backward, float* row_loss,
                                 int32_t* row_agreed, cudaStream_t stream,
                                 const float* row_weight) {
  cross_entropy_kernel<<<row_grid(rows), kThreads, 0, stream>>>(
      logits, labels, rows, vocab, grad_scale, backward, row_loss, row_agreed, row_weight);
  return cudaGetLastError();
}
}  // namespace

cudaError_t launch_cross_entropy(float* logits, const int32_t* labels, uint32_t rows,
                                 uint32_t vocab, float grad_scale, bool backward, float* row_loss,
                                 int32_t* row_agreed, cudaStream_t stream,
                                 const float* row_weight) {
  return cross_entropy_launch(logits, labels, rows, vocab, grad_scale, backward, row_loss,
                              row_agreed, stream, row_weight);
}

cudaError_t launch_cross_entropy(uint16_t* logits, const int32_t* labels, uint32_t rows,
                                 uint32_t vocab, float grad_scale, bool backward, float* row_loss,
                                 int32_t* row_agreed, cudaStream_t stream,
                                 const float* row_weight) {
  return cross_entropy_launch(logits, labels, rows, vocab, grad_scale, backward, row_loss,
                              row_agreed, stream, row_weight);
}

uint32_t sum_squares_blocks(size_t n) {
  return uint32_t(std::clamp<size_t>((n + 4 * kThreads - 1) / (4 * kThreads), 1, kNormPartials));
}

template <class T>
cudaError_t sum_squares_launch(const T* x, size_t n, double* partials, cudaStream_t stream) {
  // Exactly sum_squares_blocks(n) blocks, each writing its slot (zero when it got no elements).
  sum_squares_kernel<<<sum_squares_blocks(n), kThreads, 0, stream>>>(x, n, partials);
  return cudaGetLastError();
}
cudaError_t launch_sum_squares(const float* x, size_t n, double* partials, cudaStream_t stream) {
  return sum_squares_launch(x, n, partials, stream);
}
cudaError_t launch_sum_squares(const uint16_t* x, size_t n, double* partials, cudaStream_t stream) {
  return sum_squares_launch(x, n, partials, stream);
}

template <class G>
cudaError_t adamw_launch(float* params, const G* grads, float* m, float* v, size_t n,
                         AdamWStep step, cudaStream_t stream, uint16_t* params_bf16) {
  const AdamWFactors factors{float(step.lr),
                             float(step.beta1),
                             float(1.0 - step.beta1),
                             float(step.beta2),
                             float(1.0 - step.beta2),
                             float(step.eps),
                             float(step.keep),
                             float(step.clip),
                             float(1.0 / step.correction1),
                             float(1.0 / step.correction2)};
  adamw_kernel<<<grid_for(n / 4 + 1), kThreads, 0, stream>>>(params, grads, m, v, n, factors,
                                                             params_bf16);
  return cudaGetLastError();
}
cudaError_t launch_adamw(float* params, const float* grads, float* m, float* v, size_t n,
                         AdamWStep step, cudaStream_t stream, uint16_t* params_bf16) {
  return adamw_launch(params, grads, m, v, n, step, stream, params_bf16);
}
cudaError_t launch_adamw(float* params, const uint16_t* grads, float* m, float* v, size_t n,
                         AdamWStep step, cudaStream_t stream, uint16_t* params_bf16) {
  return adamw_launch(params, grads, m, v, n, step, stream, params_bf16);
}

}  // namespace hsring::train::cuda
