// The Gated DeltaNet kernels (model/cuda_delta_net.h). fp32 math, state and intermediates
// throughout; bf16 only where a product writes or reads the values: the input projection,
// the convolution's q, k and v (the delta rule's operands), the rule's output and the output
// projection's input.
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
// Value pairs a lane holds of one head (up to kMaxHeadDim values, an even number): values
// 2 lane + 64 j and the next, j < kPairsPerLane.
constexpr int kPairsPerLane = kMaxHeadDim / 64;

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

// The convolution's taps held in registers (Qwen3.5's kernel has 4); a longer kernel reads
// its older taps from memory again.
constexpr int kConvWindow = 4;
// Rows one warp convolves, kConvStep at a time: the next step's rows load while this step's
// are convolved, so each warp keeps a step of loads in flight for its whole run, and pays
// its fixed costs (the taps, the first rows' wait) once per kConvRun rows. Each input row is
// read (64 + 3) / 64 times, not once per tap.
constexpr int kConvStep = 8;
constexpr uint32_t kConvRun = 64;
constexpr int kConvHeld = kConvWindow - 1 + kConvStep;  // rows a step reads
static_assert(kConvStep <= 32, "a step's document starts are one a lane");

// One warp per (run of kConvRun rows, head slot), slots fastest (neighbouring warps read
// neighbouring columns of the same rows); slots [0, qk_heads) are q heads, then k heads,
// then v heads. Each lane holds channel pairs (4-byte loads: x's stride and every head's
// first column are even) as the bf16 pairs they are, one register a pair.
// kOlderTaps: the kernel is longer than kConvWindow, its older taps read from memory. A
// separate build: their loop costs the common case a third of its registers, which with it
// fits three blocks an SM, not two.
template <bool kOlderTaps>
__global__ void __launch_bounds__(kThreads, kOlderTaps ? 2 : 3)
    delta_conv_kernel(const Bf16* __restrict__ x, uint64_t x_stride, uint32_t rows,
                      DeltaNetShape shape, const Bf16* __restrict__ w,
                      const int32_t* __restrict__ doc_starts, Bf16* __restrict__ qkv) {
  const uint32_t slots = 2 * shape.qk_heads + shape.v_heads;
  const uint64_t item = uint64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const uint32_t runs = (rows + kConvRun - 1) / kConvRun;
  if (item >= uint64_t(runs) * slots) return;
  const uint32_t lane = threadIdx.x % 32;
  const auto run = uint32_t(item / slots);
  const auto slot = uint32_t(item - uint64_t(run) * slots);
  const bool is_v = slot >= 2 * shape.qk_heads;
  const uint32_t dim = is_v ? shape.v_head_dim : shape.qk_head_dim;
  const uint32_t first = is_v ? 2 * shape.qk_dim() + (slot - 2 * shape.qk_heads) * dim : slot * dim;
  const int kernel = int(shape.conv_kernel);
  const uint32_t channels = shape.conv_dim();
  const int r0 = int(run * kConvRun);
  const int r_end = int(std::min(uint32_t(r0) + kConvRun, rows));
  // The weight on the row d back of the head's channel i (w holds the oldest tap first).
  const auto weight = [&](uint32_t i, int d) {
    return gpu::bf16_to_float(w[uint64_t(first + i) * kernel + (kernel - 1 - d)]);
  };
  // Lane pair j of row r, zeros outside [0, r_end) (before the batch: no history; past the
  // run: not this warp's).
  const auto load_pair = [&](int r, int j) -> uint32_t {
    const uint32_t i = 2 * lane + 64 * j;
    return r >= 0 && r < r_end && i < dim
               ? *reinterpret_cast<const uint32_t*>(x + uint64_t(r) * x_stride + first + i)
               : 0u;  // two bf16 zeros
  };
  // Row s + t's document start is lane t's: loaded beside the rows, not behind each row's
  // bounds check, where a step's eight loads would be waited on one after another.
  const auto load_start = [&](int s) {
    return lane < uint32_t(kConvStep) && s + int(lane) < r_end ? doc_starts[s + lane] : 0;
  };
  // tap[j][e][d]: weight(2 lane + 64 j + e, d).
  float tap[kPairsPerLane][2][kConvWindow] = {};
#pragma unroll
  for (int j = 0; j < kPairsPerLane; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const uint32_t i = 2 * lane + 64 * j + e;
#pragma unroll
      for (int d = 0; d < kConvWindow; ++d)
        if (i < dim && d < kernel) tap[j][e][d] = weight(i, d);
    }
  // held[n]: row s - kConvWindow + 1 + n of the step starting at row s; ahead: the next
  // step's rows, in flight while this step is convolved.
  uint32_t held[kConvHeld][kPairsPerLane];
  uint32_t ahead[kConvStep][kPairsPerLane];
#pragma unroll
  for (int n = 0; n < kConvHeld; ++n)
#pragma unroll
    for (int j = 0; j < kPairsPerLane; ++j) held[n][j] = load_pair(r0 - (kConvWindow - 1) + n, j);
  int32_t starts = load_start(r0);
  for (int s = r0; s < r_end; s += kConvStep) {
#pragma unroll
    for (int n = 0; n < kConvStep; ++n)
#pragma unroll
      for (int j = 0; j < kPairsPerLane; ++j) ahead[n][j] = load_pair(s + kConvStep + n, j);
    const int32_t starts_ahead = load_start(s + kConvStep);
#pragma unroll
    for (int t = 0; t < kConvStep; ++t) {
      const int r = s + t;
      if (r >= r_end) break;
      const int start = __shfl_sync(0xFFFFFFFFu, starts, t);
      float y[kPairsPerLane][2];
      float squares = 0;
#pragma unroll
      for (int j = 0; j < kPairsPerLane; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const uint32_t i = 2 * lane + 64 * j + e;
          float sum = 0;
          // Oldest tap first, as the reference sums; taps before the document read as zero.
          for (int d = kernel - 1; kOlderTaps && d >= kConvWindow; --d)
            if (i < dim && r - d >= start)
              sum += weight(i, d) * gpu::bf16_to_float(x[uint64_t(r - d) * x_stride + first + i]);
#pragma unroll
          for (int d = kConvWindow - 1; d >= 0; --d)
            if (d < kernel && r - d >= start) {
              const float2 pair = gpu::unpack_bf16(held[t + kConvWindow - 1 - d][j]);
              sum += tap[j][e][d] * (e == 0 ? pair.x : pair.y);
            }
          y[j][e] = i < dim ? silu(sum) : 0.0f;
          squares += y[j][e] * y[j][e];
        }
      float scale = 1.0f;
      if (!is_v) {
        scale = rsqrtf(gpu::warp_sum(squares) + 1e-6f);
        if (slot < shape.qk_heads) scale *= rsqrtf(float(shape.qk_head_dim));
      }
      Bf16* out = qkv + uint64_t(r) * channels + first;
#pragma unroll
      for (int j = 0; j < kPairsPerLane; ++j) {
        const uint32_t i = 2 * lane + 64 * j;
        if (i < dim)
          *reinterpret_cast<uint32_t*>(out + i) = gpu::pack_bf16(y[j][0] * scale, y[j][1] * scale);
      }
    }
    // Slide by a step: the last kConvWindow - 1 rows stay as history.
#pragma unroll
    for (int n = 0; n < kConvWindow - 1; ++n)
#pragma unroll
      for (int j = 0; j < kPairsPerLane; ++j) held[n][j] = held[n + kConvStep][j];
#pragma unroll
    for (int n = 0; n < kConvStep; ++n)
#pragma unroll
      for (int j = 0; j < kPairsPerLane; ++j) held[n + kConvWindow - 1][j] = ahead[n][j];
    starts = starts_ahead;
  }
}

__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__global__ void delta_gates_kernel(const Bf16* __restrict__ a, const Bf16* __restrict__ b,
                                   uint64_t stride, uint32_t rows, uint32_t v_heads,
                                   const float* __restrict__ a_log,
                                   const float* __restrict__ dt_bias, float* __restrict__ g,
                                   float* __restrict__ beta) {
  const uint64_t total = uint64_t(rows) * v_heads;
  for (uint64_t e = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t r = e / v_heads;
    const auto h = uint32_t(e - r * v_heads);
    g[e] = -expf(a_log[h]) * softplus(gpu::bf16_to_float(a[r * stride + h]) + dt_bias[h]);
    beta[e] = 1.0f / (1.0f + expf(-gpu::bf16_to_float(b[r * stride + h])));
  }
}

// The oracle: one block per (document, value head), one thread per state column, the
// state [dk][dv] in shared memory; tokens one after another as gated_delta_rule
// (model/cpu_delta_net.h).
__global__ void delta_recurrent_kernel(const float* __restrict__ qkv, const float* __restrict__ g,
                                       const float* __restrict__ beta, DeltaNetShape shape,
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

// One warp per (row, head), in pairs (dim and z's stride are even). x and z are loaded
// together, so the warp waits on memory once, not again after the norm's sum.
__global__ void gated_rms_norm_kernel(const Bf16* __restrict__ x, const Bf16* __restrict__ z,
                                      uint64_t z_stride, uint32_t rows, uint32_t v_heads,
                                      uint32_t dim, const float* __restrict__ weight, float eps,
                                      Bf16* __restrict__ y) {
  const uint64_t item = uint64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (item >= uint64_t(rows) * v_heads) return;
  const uint32_t lane = threadIdx.x % 32;
  const uint64_t row = item / v_heads;
  const auto head = uint32_t(item - row * v_heads);
  const Bf16* xr = x + item * dim;
  const Bf16* zr = z + row * z_stride + uint64_t(head) * dim;
  float2 values[kPairsPerLane], gates[kPairsPerLane];
#pragma unroll
  for (int j = 0; j < kPairsPerLane; ++j) {
    const uint32_t i = 2 * lane + 64 * j;
    values[j] = gates[j] = make_float2(0.0f, 0.0f);
    if (i < dim) {
      values[j] = gpu::unpack_bf16(*reinterpret_cast<const uint32_t*>(xr + i));
      gates[j] = gpu::unpack_bf16(*reinterpret_cast<const uint32_t*>(zr + i));
    }
  }
  float squares = 0;
#pragma unroll
  for (int j = 0; j < kPairsPerLane; ++j)
    squares += values[j].x * values[j].x + values[j].y * values[j].y;
  const float scale = rsqrtf(gpu::warp_sum(squares) / float(dim) + eps);
  auto* out = reinterpret_cast<uint32_t*>(y + item * dim);
#pragma unroll
  for (int j = 0; j < kPairsPerLane; ++j) {
    const uint32_t i = 2 * lane + 64 * j;
    if (i >= dim) continue;
    out[i / 2] = gpu::bf16_pair(weight[i] * (values[j].x * scale) * silu(gates[j].x),
                                weight[i + 1] * (values[j].y * scale) * silu(gates[j].y));
  }
}

unsigned warp_blocks(uint64_t warps) { return unsigned((warps + kWarps - 1) / kWarps); }

}  // namespace

bool delta_net_supports(uint32_t qk_head_dim, uint32_t v_head_dim) {
  return qk_head_dim >= 8 && qk_head_dim <= kMaxHeadDim && qk_head_dim % 8 == 0 &&
         v_head_dim >= 8 && v_head_dim <= kMaxHeadDim && v_head_dim % 8 == 0;
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

cudaError_t launch_delta_conv(const Bf16* x, uint64_t x_stride, uint32_t rows, DeltaNetShape shape,
                              const Bf16* w, const int32_t* doc_starts, Bf16* qkv,
                              cudaStream_t stream) {
  if (!delta_net_supports(shape.qk_head_dim, shape.v_head_dim) || x_stride % 2 != 0)
    return cudaErrorInvalidValue;
  const uint64_t warps =
      uint64_t((rows + kConvRun - 1) / kConvRun) * (2 * shape.qk_heads + shape.v_heads);
  if (warps == 0) return cudaSuccess;
  if (shape.conv_kernel > uint32_t(kConvWindow))
    delta_conv_kernel<true>
        <<<warp_blocks(warps), kThreads, 0, stream>>>(x, x_stride, rows, shape, w, doc_starts, qkv);
  else
    delta_conv_kernel<false>
        <<<warp_blocks(warps), kThreads, 0, stream>>>(x, x_stride, rows, shape, w, doc_starts, qkv);
  return cudaGetLastError();
}

cudaError_t launch_delta_gates(const Bf16* a, const Bf16* b, uint64_t stride, uint32_t rows,
                               uint32_t v_heads, const float* a_log, const float* dt_bias, float* g,
                               float* beta, cudaStream_t stream) {
  const uint64_t total = uint64_t(rows) * v_heads;
  if (total == 0) return cudaSuccess;
  delta_gates_kernel<<<gpu::grid_stride_blocks(total, kThreads), kThreads, 0, stream>>>(
      a, b, stride, rows, v_heads, a_log, dt_bias, g, beta);
  return cudaGetLastError();
}

cudaError_t launch_delta_rule_recurrent(const float* qkv, const float* g, const float* beta,
                                        DeltaNetShape shape, const DeltaSpan* documents,
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

cudaError_t launch_gated_rms_norm(const Bf16* x, const Bf16* z, uint64_t z_stride, uint32_t rows,
                                  uint32_t v_heads, uint32_t dim, const float* weight, float eps,
                                  Bf16* y, cudaStream_t stream) {
  if (dim > kMaxHeadDim || dim % 2 != 0 || z_stride % 2 != 0) return cudaErrorInvalidValue;
  const uint64_t warps = uint64_t(rows) * v_heads;
  if (warps == 0) return cudaSuccess;
  gated_rms_norm_kernel<<<warp_blocks(warps), kThreads, 0, stream>>>(x, z, z_stride, rows, v_heads,
                                                                     dim, weight, eps, y);
  return cudaGetLastError();
}

}  // namespace hsring
