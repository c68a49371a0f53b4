// Element-wise, per-row and optimizer kernels that only the drafter's training step has (the
// shared ops are gpu/ops/'s). The attention kernels are in cuda_sliding_window_attention.cu.
#include <cuda_runtime.h>

#include <algorithm>

#include "gpu/bf16.cuh"
#include "gpu/block_reduce.cuh"
#include "gpu/grid_stride.cuh"
#include "gpu/launch_grid.h"
#include "train/cuda_drafter_kernels.h"

namespace hsring::train {

namespace {

// gpu/bf16.cuh's loads and stores of fp32 or bf16 arrays, and the grid-stride loops.
using gpu::bf16_pair;
using gpu::float_to_bf16;
using gpu::four_aligned;
using gpu::load;
using gpu::load4;
using gpu::load8;
using gpu::quads_then_rest;
using gpu::store;
using gpu::store4;
using gpu::store8;

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

__global__ void doc_bounds_kernel(const int32_t* __restrict__ offsets, uint32_t docs, uint32_t rows,
                                  int32_t* __restrict__ start, int32_t* __restrict__ end) {
  HSRING_GRID_STRIDE(t, rows) {
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
  HSRING_GRID_STRIDE(c, cols) {
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

__global__ void add_kernel(float* __restrict__ a, const float* __restrict__ b, uint64_t n) {
  HSRING_GRID_STRIDE(i, n) a[i] += b[i];
}

__global__ void scale_kernel(float* __restrict__ x, uint64_t n, float factor) {
  HSRING_GRID_STRIDE(i, n) x[i] *= factor;
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
  sum = gpu::warp_sum(sum);
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
  HSRING_GRID_STRIDE(q, quads) {
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
      reinterpret_cast<uint2*>(params_bf16)[q] = uint2{bf16_pair(p.x, p.y), bf16_pair(p.z, p.w)};
  }
  HSRING_GRID_STRIDE(j, n - 4 * quads) {
    const uint64_t i = 4 * quads + j;
    const float p = adamw_update(params[i], m[i], v[i], load(grads, i), f);
    if (params_bf16) params_bf16[i] = float_to_bf16(p);
  }
}

}  // namespace

cudaError_t launch_doc_bounds(const int32_t* doc_offsets, uint32_t docs, uint32_t rows,
                              int32_t* start, int32_t* end, cudaStream_t stream) {
  doc_bounds_kernel<<<grid_for(rows), kThreads, 0, stream>>>(doc_offsets, docs, rows, start, end);
  return cudaGetLastError();
}

cudaError_t launch_sum_rows(const float* x, const int32_t* index, uint32_t n, uint32_t cols,
                            float* partials, float* y, uint16_t* y_bf16, cudaStream_t stream) {
  return sum_rows_launch(x, index, n, cols, partials, y, y_bf16, stream);
}

cudaError_t launch_sum_rows(const uint16_t* x, const int32_t* index, uint32_t n, uint32_t cols,
                            float* partials, float* y, uint16_t* y_bf16, cudaStream_t stream) {
  return sum_rows_launch(x, index, n, cols, partials, y, y_bf16, stream);
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

}  // namespace hsring::train
