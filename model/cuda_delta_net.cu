// The Gated DeltaNet kernels (model/cuda_delta_net.h). fp32 math, state and intermediates
// throughout (q, k and v too: normalised dot products near zero feed the gated RMSNorm,
// which would magnify a bf16 rounding); bf16 only at the output projection's input.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "gpu/bf16.cuh"
#include "gpu/block_reduce.cuh"
#include "gpu/launch_grid.h"
#include "model/cuda_delta_net.h"

namespace hsring {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxHeadDim = int(kDeltaMaxHeadDim);
constexpr int kPerLane = kMaxHeadDim / 32;

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

// One warp per (row, head slot): slots [0, qk_heads) are q heads, then k heads, then v heads.
__global__ void delta_conv_kernel(const float* __restrict__ x, uint64_t x_stride, uint32_t rows,
                                  DeltaShape shape, const Bf16* __restrict__ w,
                                  const int32_t* __restrict__ doc_starts, float* __restrict__ qkv) {
  const uint32_t slots = 2 * shape.qk_heads + shape.v_heads;
  const uint64_t item = uint64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (item >= uint64_t(rows) * slots) return;
  const uint32_t lane = threadIdx.x % 32;
  const auto row = int32_t(item / slots);
  const auto slot = uint32_t(item % slots);
  const bool is_v = slot >= 2 * shape.qk_heads;
  const uint32_t dim = is_v ? shape.v_head_dim : shape.qk_head_dim;
  const uint32_t first = is_v ? 2 * shape.qk_dim() + (slot - 2 * shape.qk_heads) * dim : slot * dim;
  const uint32_t kernel = shape.conv_kernel;
  const int32_t start = doc_starts[row];
  const uint32_t channels = shape.conv_dim();
  float y[kPerLane];
  float squares = 0;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const uint32_t i = lane + 32 * j;
    y[j] = 0;
    if (i >= dim) continue;
    const uint32_t c = first + i;
    float sum = 0;
    // Tap k reads row - (kernel - 1) + k, when it is in this document.
    for (uint32_t k = 0; k < kernel; ++k) {
      const int32_t from = row - int32_t(kernel - 1) + int32_t(k);
      if (from < start) continue;
      sum += gpu::bf16_to_float(w[uint64_t(c) * kernel + k]) * x[uint64_t(from) * x_stride + c];
    }
    y[j] = silu(sum);
    squares += y[j] * y[j];
  }
  float scale = 1.0f;
  if (!is_v) {
    scale = rsqrtf(gpu::warp_sum(squares) + 1e-6f);
    if (slot < shape.qk_heads) scale *= rsqrtf(float(shape.qk_head_dim));
  }
  float* out = qkv + uint64_t(row) * channels + first;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const uint32_t i = lane + 32 * j;
    if (i < dim) out[i] = y[j] * scale;
  }
}

__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__global__ void delta_gates_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                   uint64_t stride, uint32_t rows, uint32_t v_heads,
                                   const float* __restrict__ a_log,
                                   const float* __restrict__ dt_bias, float* __restrict__ g,
                                   float* __restrict__ beta) {
  const uint64_t total = uint64_t(rows) * v_heads;
  for (uint64_t e = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t r = e / v_heads;
    const auto h = uint32_t(e - r * v_heads);
    g[e] = -expf(a_log[h]) * softplus(a[r * stride + h] + dt_bias[h]);
    beta[e] = 1.0f / (1.0f + expf(-b[r * stride + h]));
  }
}

// The oracle: one block per (document, value head), one thread per state column, the
// state [dk][dv] in shared memory; tokens one after another as gated_delta_rule
// (model/cpu_delta_net.h).
__global__ void delta_recurrent_kernel(const float* __restrict__ qkv, const float* __restrict__ g,
                                       const float* __restrict__ beta, DeltaShape shape,
                                       const DeltaSpan* __restrict__ documents,
                                       float* __restrict__ out) {
  extern __shared__ float state[];
  const int dk = int(shape.qk_head_dim), dv = int(shape.v_head_dim);
  const int vh = int(shape.v_heads);
  float* q_s = state + dk * dv;
  float* k_s = q_s + dk;
  const DeltaSpan doc = documents[blockIdx.x];
  const int h = int(blockIdx.y);
  const int kh = h / (vh / int(shape.qk_heads));
  const uint64_t stride = shape.conv_dim();
  const int j = int(threadIdx.x);
  for (int i = 0; i < dk && j < dv; ++i) state[i * dv + j] = 0.0f;
  for (int t = doc.begin; t < doc.end; ++t) {
    __syncthreads();
    for (int i = j; i < dk; i += int(blockDim.x)) {
      q_s[i] = qkv[uint64_t(t) * stride + size_t(kh) * dk + i];
      k_s[i] = qkv[uint64_t(t) * stride + shape.qk_dim() + size_t(kh) * dk + i];
    }
    __syncthreads();
    if (j >= dv) continue;
    const float decay = expf(g[uint64_t(t) * vh + h]);
    const float b = beta[uint64_t(t) * vh + h];
    const float v = qkv[uint64_t(t) * stride + 2 * size_t(shape.qk_dim()) + size_t(h) * dv + j];
    float memory = 0;
    for (int i = 0; i < dk; ++i) {
      state[i * dv + j] *= decay;
      memory += state[i * dv + j] * k_s[i];
    }
    const float delta = (v - memory) * b;
    float o = 0;
    for (int i = 0; i < dk; ++i) {
      state[i * dv + j] += k_s[i] * delta;
      o += state[i * dv + j] * q_s[i];
    }
    out[uint64_t(t) * shape.v_dim() + size_t(h) * dv + j] = o;
  }
}

// One warp per (row, head).
__global__ void gated_rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ z,
                                      uint64_t z_stride, uint32_t rows, uint32_t v_heads,
                                      uint32_t dim, const float* __restrict__ weight, float eps,
                                      Bf16* __restrict__ y) {
  const uint64_t item = uint64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (item >= uint64_t(rows) * v_heads) return;
  const uint32_t lane = threadIdx.x % 32;
  const uint64_t row = item / v_heads;
  const auto head = uint32_t(item - row * v_heads);
  const float* xr = x + item * dim;
  const float* zr = z + row * z_stride + uint64_t(head) * dim;
  float values[kPerLane];
  float squares = 0;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const uint32_t i = lane + 32 * j;
    values[j] = i < dim ? xr[i] : 0.0f;
    squares += values[j] * values[j];
  }
  const float scale = rsqrtf(gpu::warp_sum(squares) / float(dim) + eps);
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const uint32_t i = lane + 32 * j;
    if (i < dim)
      y[item * dim + i] = gpu::float_to_bf16(weight[i] * (values[j] * scale) * silu(zr[i]));
  }
}

unsigned warp_blocks(uint64_t warps) { return unsigned((warps + kWarps - 1) / kWarps); }

}  // namespace

bool delta_net_supports(uint32_t qk_head_dim, uint32_t v_head_dim) {
  return qk_head_dim >= 8 && qk_head_dim <= kMaxHeadDim && qk_head_dim % 8 == 0 &&
         v_head_dim >= 4 && v_head_dim <= kMaxHeadDim && v_head_dim % 4 == 0;
}

std::vector<DeltaSpan> delta_chunks(const int32_t* doc_offsets, size_t count) {
  std::vector<DeltaSpan> chunks;
  for (size_t d = 0; d + 1 < count; ++d)
    for (int32_t r = doc_offsets[d]; r < doc_offsets[d + 1]; r += int32_t(kDeltaChunk))
      chunks.push_back({r, std::min(r + int32_t(kDeltaChunk), doc_offsets[d + 1])});
  return chunks;
}

std::vector<DeltaSpan> delta_documents(const int32_t* doc_offsets, size_t count) {
  std::vector<DeltaSpan> docs;
  for (size_t d = 0; d + 1 < count; ++d) docs.push_back({doc_offsets[d], doc_offsets[d + 1]});
  std::stable_sort(docs.begin(), docs.end(), [](const DeltaSpan& a, const DeltaSpan& b) {
    return a.end - a.begin > b.end - b.begin;
  });
  return docs;
}

std::vector<int32_t> delta_doc_starts(const int32_t* doc_offsets, size_t count) {
  std::vector<int32_t> starts;
  for (size_t d = 0; d + 1 < count; ++d)
    starts.insert(starts.end(), size_t(doc_offsets[d + 1] - doc_offsets[d]), doc_offsets[d]);
  return starts;
}

cudaError_t launch_delta_conv(const float* x, uint64_t x_stride, uint32_t rows, DeltaShape shape,
                              const Bf16* w, const int32_t* doc_starts, float* qkv,
                              cudaStream_t stream) {
  if (!delta_net_supports(shape.qk_head_dim, shape.v_head_dim)) return cudaErrorInvalidValue;
  const uint64_t warps = uint64_t(rows) * (2 * shape.qk_heads + shape.v_heads);
  if (warps == 0) return cudaSuccess;
  delta_conv_kernel<<<warp_blocks(warps), kThreads, 0, stream>>>(x, x_stride, rows, shape, w,
                                                                 doc_starts, qkv);
  return cudaGetLastError();
}

cudaError_t launch_delta_gates(const float* a, const float* b, uint64_t stride, uint32_t rows,
                               uint32_t v_heads, const float* a_log, const float* dt_bias, float* g,
                               float* beta, cudaStream_t stream) {
  const uint64_t total = uint64_t(rows) * v_heads;
  if (total == 0) return cudaSuccess;
  delta_gates_kernel<<<gpu::grid_stride_blocks(total, kThreads), kThreads, 0, stream>>>(
      a, b, stride, rows, v_heads, a_log, dt_bias, g, beta);
  return cudaGetLastError();
}

cudaError_t launch_delta_rule_recurrent(const float* qkv, const float* g, const float* beta,
                                        DeltaShape shape, const DeltaSpan* documents,
                                        uint32_t document_count, float* out, cudaStream_t stream) {
  if (!delta_net_supports(shape.qk_head_dim, shape.v_head_dim) || shape.qk_heads == 0 ||
      shape.v_heads % shape.qk_heads != 0)
    return cudaErrorInvalidValue;
  if (document_count == 0) return cudaSuccess;
  const size_t bytes =
      (size_t(shape.qk_head_dim) * shape.v_head_dim + 2 * shape.qk_head_dim) * sizeof(float);
  if (cudaError_t err = cudaFuncSetAttribute(
          delta_recurrent_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
      err != cudaSuccess)
    return err;
  delta_recurrent_kernel<<<dim3(document_count, shape.v_heads), kMaxHeadDim, bytes, stream>>>(
      qkv, g, beta, shape, documents, out);
  return cudaGetLastError();
}

cudaError_t launch_gated_rms_norm(const float* x, const float* z, uint64_t z_stride, uint32_t rows,
                                  uint32_t v_heads, uint32_t dim, const float* weight, float eps,
                                  Bf16* y, cudaStream_t stream) {
  if (dim > kMaxHeadDim) return cudaErrorInvalidValue;
  const uint64_t warps = uint64_t(rows) * v_heads;
  if (warps == 0) return cudaSuccess;
  gated_rms_norm_kernel<<<warp_blocks(warps), kThreads, 0, stream>>>(x, z, z_stride, rows, v_heads,
                                                                     dim, weight, eps, y);
  return cudaGetLastError();
}

}  // namespace hsring
