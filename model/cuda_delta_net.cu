// The Gated DeltaNet kernels (model/cuda_delta_net.h). fp32 math, state and intermediates
// throughout (q, k and v too: normalised dot products near zero feed the gated RMSNorm,
// which would magnify a bf16 rounding); bf16 only at the output projection's input.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "gpu/launch_grid.h"
#include "model/cuda_delta_net.h"

namespace hsring::cuda_ops {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = int(kDeltaChunk);
constexpr int kMaxHeadDim = 128;
constexpr int kPerLane = kMaxHeadDim / 32;

__device__ __forceinline__ float to_float(Bf16 bits) {
  return __uint_as_float(uint32_t(bits) << 16);
}
__device__ __forceinline__ Bf16 to_bf16(float value) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(value));
}
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_xor_sync(0xFFFFFFFFu, value, offset);
  return value;
}

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
      sum += to_float(w[uint64_t(c) * kernel + k]) * x[uint64_t(from) * x_stride + c];
    }
    y[j] = silu(sum);
    squares += y[j] * y[j];
  }
  float scale = 1.0f;
  if (!is_v) {
    scale = rsqrtf(warp_sum(squares) + 1e-6f);
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

// Pass 1, one block per (chunk, value head). Shared memory: K and Q rows [kChunk][dk + 1],
// the system's strict lower part A [kChunk][kChunk + 1], the right-hand sides and then the
// solutions X [kChunk][dk + dv + 1] (W's columns, then U''s), G and beta [kChunk].
__host__ __device__ constexpr size_t prepare_smem_floats(uint32_t dk, uint32_t dv) {
  return size_t(2) * kChunk * (dk + 1) + size_t(kChunk) * (kChunk + 1) +
         size_t(kChunk) * (dk + dv + 1) + 2 * kChunk;
}

__global__ void __launch_bounds__(kThreads)
    delta_prepare_kernel(const float* __restrict__ qkv, const float* __restrict__ g,
                         const float* __restrict__ beta, DeltaShape shape,
                         const DeltaSpan* __restrict__ chunks, DeltaScratch scratch) {
  extern __shared__ float smem[];
  const int dk = int(shape.qk_head_dim), dv = int(shape.v_head_dim);
  const int vh = int(shape.v_heads);
  const int ks = dk + 1, xs = dk + dv + 1, as = kChunk + 1;
  float* k_s = smem;
  float* q_s = k_s + kChunk * ks;
  float* a_s = q_s + kChunk * ks;
  float* x_s = a_s + kChunk * as;
  float* g_s = x_s + kChunk * xs;
  float* b_s = g_s + kChunk;

  const DeltaSpan chunk = chunks[blockIdx.x];
  const int h = int(blockIdx.y);
  const int kh = h / (vh / int(shape.qk_heads));
  const int c0 = chunk.begin;
  const int len = chunk.end - chunk.begin;
  const uint64_t stride = shape.conv_dim();
  const float* q_src = qkv + size_t(kh) * dk;
  const float* k_src = q_src + shape.qk_dim();
  const float* v_src = qkv + 2 * size_t(shape.qk_dim()) + size_t(h) * dv;

  if (threadIdx.x < kChunk) {
    const int r = int(threadIdx.x);
    g_s[r] = r < len ? g[uint64_t(c0 + r) * vh + h] : 0.0f;
    b_s[r] = r < len ? beta[uint64_t(c0 + r) * vh + h] : 0.0f;
  }
  __syncthreads();
  if (threadIdx.x == 0)  // G_i: the running sum of g, in token order
    for (int r = 1; r < kChunk; ++r) g_s[r] += g_s[r - 1];
  __syncthreads();

  for (int e = int(threadIdx.x); e < kChunk * dk; e += kThreads) {
    const int r = e / dk, i = e % dk;
    const bool in = r < len;
    const float kv = in ? k_src[uint64_t(c0 + r) * stride + i] : 0.0f;
    k_s[r * ks + i] = kv;
    q_s[r * ks + i] = in ? q_src[uint64_t(c0 + r) * stride + i] : 0.0f;
    x_s[r * xs + i] = b_s[r] * expf(g_s[r]) * kv;  // W's right-hand side
  }
  for (int e = int(threadIdx.x); e < kChunk * dv; e += kThreads) {
    const int r = e / dv, i = e % dv;
    x_s[r * xs + dk + i] = r < len ? b_s[r] * v_src[uint64_t(c0 + r) * stride + i] : 0.0f;
  }
  __syncthreads();

  // A[i][j] = beta_i exp(G_i - G_j) (k_i . k_j) for j < i; P[i][j] = exp(G_i - G_j) (q_i . k_j)
  // for j <= i, zero elsewhere (the decay ratio of two tokens, never a lone exp(-G)).
  float* p_out = scratch.p + size_t(h) * kChunk;
  for (int e = int(threadIdx.x); e < kChunk * kChunk; e += kThreads) {
    const int i = e / kChunk, j = e % kChunk;
    float kk = 0, qk = 0;
    if (j <= i && i < len) {
      const float* ki = k_s + i * ks;
      const float* qi = q_s + i * ks;
      const float* kj = k_s + j * ks;
      for (int d = 0; d < dk; ++d) {
        kk = fmaf(ki[d], kj[d], kk);
        qk = fmaf(qi[d], kj[d], qk);
      }
      const float decay = expf(g_s[i] - g_s[j]);
      kk *= b_s[i] * decay;
      qk *= decay;
    }
    a_s[i * as + j] = j < i ? kk : 0.0f;
    if (i < len) p_out[uint64_t(c0 + i) * vh * kChunk + j] = qk;
  }
  __syncthreads();

  // Forward substitution, one thread per column of [W | U']: X_i -= sum_{j<i} A[i][j] X_j.
  // Each column is its own sequence: no synchronisation inside.
  const int col = int(threadIdx.x);
  if (col < dk + dv) {
    for (int i = 1; i < len; ++i) {
      float x = x_s[i * xs + col];
      const float* a_row = a_s + i * as;
      for (int j = 0; j < i; ++j) x = fmaf(-a_row[j], x_s[j * xs + col], x);
      x_s[i * xs + col] = x;
    }
    for (int i = 0; i < len; ++i) {
      const float x = x_s[i * xs + col];
      if (col < dk)
        scratch.w[(uint64_t(c0 + i) * vh + h) * dk + col] = x;
      else
        scratch.u[(uint64_t(c0 + i) * vh + h) * dv + (col - dk)] = x;
    }
  }
  if (threadIdx.x < uint32_t(len))
    scratch.g_sum[uint64_t(c0 + int(threadIdx.x)) * vh + h] = g_s[threadIdx.x];
}

// Pass 2, one block per (document, value head, slice of kSlice state columns), 128
// threads. Shared memory (floats): S [dk][kSlice], W and then K [kChunk][dk + 4] (K is
// loaded over W once U = U' - W S is done), Q [kChunk][dk + 4], P [kChunk][kChunk + 4], U
// [kChunk][kSlice + 4], G [kChunk]: about 110 KB at dk 128, two blocks per SM.
constexpr int kStateThreads = 128;
constexpr int kSlice = 32;
constexpr int kPs = kChunk + 4;
constexpr int kUs = kSlice + 4;

__host__ __device__ constexpr size_t state_smem_bytes(uint32_t dk) {
  return (size_t(dk) * kSlice + size_t(2) * kChunk * (dk + 4) + size_t(kChunk) * kPs +
          size_t(kChunk) * kUs + kChunk) *
         sizeof(float);
}

__device__ __forceinline__ float4 load4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}

__global__ void __launch_bounds__(kStateThreads)
    delta_state_kernel(const float* __restrict__ qkv, DeltaShape shape,
                       const DeltaSpan* __restrict__ documents, DeltaScratch scratch,
                       float* __restrict__ out) {
  extern __shared__ __align__(16) float smem_f[];
  const int dk = int(shape.qk_head_dim), dv = int(shape.v_head_dim);
  const int vh = int(shape.v_heads);
  const int ws = dk + 4;
  float* s_s = smem_f;              // [dk][kSlice]
  float* w_s = s_s + dk * kSlice;   // [kChunk][ws]: W, then K
  float* q_s = w_s + kChunk * ws;   // [kChunk][ws]
  float* p_s = q_s + kChunk * ws;   // [kChunk][kPs]
  float* u_s = p_s + kChunk * kPs;  // [kChunk][kUs]
  float* g_s = u_s + kChunk * kUs;  // [kChunk]
  float* k_s = w_s;

  const DeltaSpan doc = documents[blockIdx.x];
  const int h = int(blockIdx.y);
  const int kh = h / (vh / int(shape.qk_heads));
  const int col0 = int(blockIdx.z) * kSlice;
  const int cols = min(kSlice, dv - col0);
  const uint64_t stride = shape.conv_dim();
  const float* q_src = qkv + size_t(kh) * dk;
  const float* k_src = q_src + shape.qk_dim();
  const int tid = int(threadIdx.x);
  // Thread tiles: rows 4 rg .. + 3 and columns 4 cg .. + 3 of U and O; state rows 8 rg ..
  // + 7 and the same columns of S.
  const int rg = tid / 8, cg = tid % 8;
  const int n0 = cg * 4;

  for (int e = tid; e < dk * kSlice; e += kStateThreads) s_s[e] = 0.0f;  // a document starts empty

  for (int c0 = doc.begin; c0 < doc.end; c0 += kChunk) {
    const int len = min(kChunk, doc.end - c0);
    __syncthreads();  // the previous chunk is done with every tile
    for (int e = tid; e < kChunk * (dk / 4); e += kStateThreads) {
      const int r = e / (dk / 4), i = (e % (dk / 4)) * 4;
      const bool in = r < len;
      const float4 zero = make_float4(0, 0, 0, 0);
      *reinterpret_cast<float4*>(w_s + r * ws + i) =
          in ? load4(scratch.w + (uint64_t(c0 + r) * vh + h) * dk + i) : zero;
      *reinterpret_cast<float4*>(q_s + r * ws + i) =
          in ? load4(q_src + uint64_t(c0 + r) * stride + i) : zero;
    }
    for (int e = tid; e < kChunk * kChunk; e += kStateThreads) {
      const int r = e / kChunk, j = e % kChunk;
      p_s[r * kPs + j] = r < len ? scratch.p[(uint64_t(c0 + r) * vh + h) * kChunk + j] : 0.0f;
    }
    for (int e = tid; e < kChunk * kSlice; e += kStateThreads) {
      const int r = e / kSlice, n = e % kSlice;
      u_s[r * kUs + n] =
          r < len && n < cols ? scratch.u[(uint64_t(c0 + r) * vh + h) * dv + col0 + n] : 0.0f;
    }
    if (tid < kChunk) g_s[tid] = tid < len ? scratch.g_sum[uint64_t(c0 + tid) * vh + h] : 0.0f;
    __syncthreads();

    // U = U' - W S and Q S together: both read the same state values.
    const int r0 = rg * 4;
    float acc_u[4][4] = {}, acc_o[4][4] = {};
    for (int i = 0; i < dk; i += 4) {
      float4 s[4];
#pragma unroll
      for (int a = 0; a < 4; ++a) s[a] = load4(s_s + (i + a) * kSlice + n0);
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float4 wv = load4(w_s + (r0 + r) * ws + i);
        const float4 q4 = load4(q_s + (r0 + r) * ws + i);
        const float wa[4] = {wv.x, wv.y, wv.z, wv.w};
        const float qv[4] = {q4.x, q4.y, q4.z, q4.w};
#pragma unroll
        for (int a = 0; a < 4; ++a) {
          acc_u[r][0] = fmaf(wa[a], s[a].x, acc_u[r][0]);
          acc_u[r][1] = fmaf(wa[a], s[a].y, acc_u[r][1]);
          acc_u[r][2] = fmaf(wa[a], s[a].z, acc_u[r][2]);
          acc_u[r][3] = fmaf(wa[a], s[a].w, acc_u[r][3]);
          acc_o[r][0] = fmaf(qv[a], s[a].x, acc_o[r][0]);
          acc_o[r][1] = fmaf(qv[a], s[a].y, acc_o[r][1]);
          acc_o[r][2] = fmaf(qv[a], s[a].z, acc_o[r][2]);
          acc_o[r][3] = fmaf(qv[a], s[a].w, acc_o[r][3]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int n = 0; n < 4; ++n) u_s[(r0 + r) * kUs + n0 + n] -= acc_u[r][n];
    __syncthreads();
    // W is done with: K takes its place (read after the next barrier).
    for (int e = tid; e < kChunk * (dk / 4); e += kStateThreads) {
      const int r = e / (dk / 4), i = (e % (dk / 4)) * 4;
      *reinterpret_cast<float4*>(k_s + r * ws + i) =
          r < len ? load4(k_src + uint64_t(c0 + r) * stride + i) : make_float4(0, 0, 0, 0);
    }

    // O = diag(gamma) Q S + P U.
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const float gamma = expf(g_s[r0 + r]);
#pragma unroll
      for (int n = 0; n < 4; ++n) acc_o[r][n] *= gamma;
    }
    for (int j = 0; j < kChunk; j += 4) {
      float4 u[4];
#pragma unroll
      for (int a = 0; a < 4; ++a) u[a] = load4(u_s + (j + a) * kUs + n0);
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float4 pv = load4(p_s + (r0 + r) * kPs + j);
        const float pa[4] = {pv.x, pv.y, pv.z, pv.w};
#pragma unroll
        for (int a = 0; a < 4; ++a) {
          acc_o[r][0] = fmaf(pa[a], u[a].x, acc_o[r][0]);
          acc_o[r][1] = fmaf(pa[a], u[a].y, acc_o[r][1]);
          acc_o[r][2] = fmaf(pa[a], u[a].z, acc_o[r][2]);
          acc_o[r][3] = fmaf(pa[a], u[a].w, acc_o[r][3]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      if (r0 + r >= len) break;
      float* o = out + uint64_t(c0 + r0 + r) * shape.v_dim() + size_t(h) * dv + col0;
#pragma unroll
      for (int n = 0; n < 4; ++n)
        if (n0 + n < cols) o[n0 + n] = acc_o[r][n];
    }

    __syncthreads();  // K has landed
    // S = gamma_L S + K^T diag(gamma_L / gamma) U, over this thread's 8 x 4 tile of S.
    const int i0 = rg * 8;
    if (i0 < dk) {
      const float g_last = g_s[len - 1];
      float acc[8][4];
      const float decay = expf(g_last);
#pragma unroll
      for (int a = 0; a < 8; ++a) {
        const float4 sv = load4(s_s + (i0 + a) * kSlice + n0);
        acc[a][0] = sv.x * decay;
        acc[a][1] = sv.y * decay;
        acc[a][2] = sv.z * decay;
        acc[a][3] = sv.w * decay;
      }
      for (int r = 0; r < len; ++r) {
        const float e = expf(g_last - g_s[r]);
        const float4 u = load4(u_s + r * kUs + n0);
        const float4 k_lo = load4(k_s + r * ws + i0), k_hi = load4(k_s + r * ws + i0 + 4);
        const float kv[8] = {k_lo.x, k_lo.y, k_lo.z, k_lo.w, k_hi.x, k_hi.y, k_hi.z, k_hi.w};
#pragma unroll
        for (int a = 0; a < 8; ++a) {
          const float ke = kv[a] * e;
          acc[a][0] = fmaf(ke, u.x, acc[a][0]);
          acc[a][1] = fmaf(ke, u.y, acc[a][1]);
          acc[a][2] = fmaf(ke, u.z, acc[a][2]);
          acc[a][3] = fmaf(ke, u.w, acc[a][3]);
        }
      }
#pragma unroll
      for (int a = 0; a < 8; ++a)
        *reinterpret_cast<float4*>(s_s + (i0 + a) * kSlice + n0) =
            make_float4(acc[a][0], acc[a][1], acc[a][2], acc[a][3]);
    }
  }
}

// The oracle: one block per (document, value head), one thread per state column, the
// state [dk][dv] in shared memory; tokens one after another as cpu::gated_delta_rule.
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
  const float scale = rsqrtf(warp_sum(squares) / float(dim) + eps);
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const uint32_t i = lane + 32 * j;
    if (i < dim) y[item * dim + i] = to_bf16(weight[i] * (values[j] * scale) * silu(zr[i]));
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

uint64_t delta_scratch_floats(uint32_t rows, DeltaShape s) {
  return uint64_t(rows) * s.v_heads * (s.qk_head_dim + s.v_head_dim + kDeltaChunk + 1);
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

cudaError_t launch_delta_rule(const float* qkv, const float* g, const float* beta, DeltaShape shape,
                              const DeltaSpan* chunks, uint32_t chunk_count,
                              const DeltaSpan* documents, uint32_t document_count,
                              DeltaScratch scratch, float* out, cudaStream_t stream) {
  if (!delta_net_supports(shape.qk_head_dim, shape.v_head_dim) || shape.qk_heads == 0 ||
      shape.v_heads % shape.qk_heads != 0 || shape.v_heads > 65535)
    return cudaErrorInvalidValue;
  if (chunk_count == 0) return cudaSuccess;
  const size_t prepare_bytes = prepare_smem_floats(shape.qk_head_dim, shape.v_head_dim) * 4;
  if (cudaError_t err = cudaFuncSetAttribute(
          delta_prepare_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(prepare_bytes));
      err != cudaSuccess)
    return err;
  delta_prepare_kernel<<<dim3(chunk_count, shape.v_heads), kThreads, prepare_bytes, stream>>>(
      qkv, g, beta, shape, chunks, scratch);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  const size_t state_bytes = state_smem_bytes(shape.qk_head_dim);
  if (cudaError_t err = cudaFuncSetAttribute(
          delta_state_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(state_bytes));
      err != cudaSuccess)
    return err;
  const unsigned slices = (shape.v_head_dim + kSlice - 1) / kSlice;
  delta_state_kernel<<<dim3(document_count, shape.v_heads, slices), kStateThreads, state_bytes,
                       stream>>>(qkv, shape, documents, scratch, out);
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

}  // namespace hsring::cuda_ops
