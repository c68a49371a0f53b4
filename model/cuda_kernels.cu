// The element-wise and row-wise kernels of the CUDA forward (attention is in
// cuda_attention.cu). Row reductions (RMSNorm, argmax) sum in a fixed tree: warp shuffles,
// then the warps' partials in index order, so their bits never depend on scheduling.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "gpu/launch_grid.h"
#include "model/cuda_kernels.h"

namespace hsring::cuda_ops {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

unsigned grid_for(uint64_t work_items) { return gpu::grid_stride_blocks(work_items, kThreads); }

// Rows handled by one block each: the grid covers them directly up to a cap.
unsigned row_grid(uint32_t rows) { return rows < 65535u * 8 ? rows : 65535u * 8; }

__device__ __forceinline__ float to_float(Bf16 bits) {
  return __uint_as_float(uint32_t(bits) << 16);
}
__device__ __forceinline__ Bf16 to_bf16(float value) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(value));
}

// Sum over the block in a fixed order; every thread gets the same total.
// REQUIRES: blockDim.x == kThreads, and no other use of `partials` in flight.
__device__ float block_sum(float value, float* partials) {
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_xor_sync(0xFFFFFFFFu, value, offset);
  if (threadIdx.x % 32 == 0) partials[threadIdx.x / 32] = value;
  __syncthreads();
  float total = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += partials[w];
  return total;
}

__global__ void embed_kernel(const Bf16* __restrict__ embed, const int32_t* __restrict__ tokens,
                             uint32_t rows, uint32_t hidden, float* __restrict__ residual) {
  const uint64_t total = uint64_t(rows) * hidden;
  for (uint64_t e = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t t = e / hidden;
    residual[e] = to_float(embed[uint64_t(tokens[t]) * hidden + (e - t * hidden)]);
  }
}

// Rows up to kCachedRow floats are read once: each thread keeps its float4s in registers
// between the sum of squares and the scaling (the residual is far larger than L2).
constexpr int kCachedVectors = 8;
constexpr uint32_t kCachedRow = kThreads * 4 * kCachedVectors;

__global__ void rms_norm_cached_kernel(const float* __restrict__ x,
                                       const float* __restrict__ weight, uint32_t rows,
                                       uint32_t dim, float eps, Bf16* __restrict__ y) {
  __shared__ float partials[kWarps];
  for (uint32_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + uint64_t(row) * dim;
    Bf16* yr = y + uint64_t(row) * dim;
    float4 cache[kCachedVectors];
    float squares = 0;
#pragma unroll
    for (int j = 0; j < kCachedVectors; ++j) {
      const uint32_t i = (threadIdx.x + j * kThreads) * 4;
      if (i < dim) {
        cache[j] = *reinterpret_cast<const float4*>(xr + i);
        squares += cache[j].x * cache[j].x + cache[j].y * cache[j].y + cache[j].z * cache[j].z +
                   cache[j].w * cache[j].w;
      }
    }
    const float scale = 1.0f / sqrtf(block_sum(squares, partials) / float(dim) + eps);
#pragma unroll
    for (int j = 0; j < kCachedVectors; ++j) {
      const uint32_t i = (threadIdx.x + j * kThreads) * 4;
      if (i < dim) {
        const float4 a = cache[j];
        const float4 w = *reinterpret_cast<const float4*>(weight + i);
        ushort4 out;
        out.x = to_bf16(a.x * scale * w.x);
        out.y = to_bf16(a.y * scale * w.y);
        out.z = to_bf16(a.z * scale * w.z);
        out.w = to_bf16(a.w * scale * w.w);
        *reinterpret_cast<ushort4*>(yr + i) = out;
      }
    }
    __syncthreads();  // partials are reused by the next row
  }
}

template <bool kVec4>
__global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                                uint32_t rows, uint32_t dim, float eps, Bf16* __restrict__ y) {
  __shared__ float partials[kWarps];
  for (uint32_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + uint64_t(row) * dim;
    Bf16* yr = y + uint64_t(row) * dim;
    float squares = 0;
    if constexpr (kVec4) {
      for (uint32_t i = threadIdx.x * 4; i < dim; i += kThreads * 4) {
        const float4 a = *reinterpret_cast<const float4*>(xr + i);
        squares += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
      }
    } else {
      for (uint32_t i = threadIdx.x; i < dim; i += kThreads) squares += xr[i] * xr[i];
    }
    const float scale = 1.0f / sqrtf(block_sum(squares, partials) / float(dim) + eps);
    if constexpr (kVec4) {
      for (uint32_t i = threadIdx.x * 4; i < dim; i += kThreads * 4) {
        const float4 a = *reinterpret_cast<const float4*>(xr + i);
        const float4 w = *reinterpret_cast<const float4*>(weight + i);
        ushort4 out;
        out.x = to_bf16(a.x * scale * w.x);
        out.y = to_bf16(a.y * scale * w.y);
        out.z = to_bf16(a.z * scale * w.z);
        out.w = to_bf16(a.w * scale * w.w);
        *reinterpret_cast<ushort4*>(yr + i) = out;
      }
    } else {
      for (uint32_t i = threadIdx.x; i < dim; i += kThreads)
        yr[i] = to_bf16(xr[i] * scale * weight[i]);
    }
    __syncthreads();  // partials are reused by the next row
  }
}

__global__ void rope_table_kernel(const int32_t* __restrict__ positions, uint32_t rows,
                                  const double* __restrict__ inv_freq,
                                  const double* __restrict__ row_bases, double scale, uint32_t half,
                                  float* __restrict__ cos_out, float* __restrict__ sin_out) {
  const uint64_t total = uint64_t(rows) * half;
  for (uint64_t e = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t r = e / half;
    const uint32_t i = uint32_t(e - r * half);
    // The host's rule (rope.cc): base^(-2i / head_dim), head_dim = 2 half.
    const double freq =
        row_bases ? pow(row_bases[r], -double(2 * i) / double(2 * half)) : inv_freq[i];
    double s, c;
    sincos(double(positions[r]) * freq, &s, &c);
    cos_out[e] = float(c * scale);
    sin_out[e] = float(s * scale);
  }
}

// Work items of a head one lane holds: RoPE pairs (i, i + rotary_dim / 2) and the
// unrotated dims, at most head_dim / 2 + head_dim - rotary_dim <= 255 for head_dim 256.
constexpr int kItemsPerLane = 8;

// One warp per (row, head) of q, k and v. Warp-uniform branches only: the shuffles of the
// norm see every lane.
__global__ void qkv_finish_kernel(const float* __restrict__ qkv, uint32_t rows, QkvShape shape,
                                  const float* __restrict__ qkv_bias,
                                  const float* __restrict__ q_norm,
                                  const float* __restrict__ k_norm, const float* __restrict__ cos,
                                  const float* __restrict__ sin, Bf16* __restrict__ q,
                                  Bf16* __restrict__ k, Bf16* __restrict__ v) {
  const uint32_t slots = shape.heads + 2 * shape.kv_heads;
  const uint32_t hd = shape.head_dim;
  const uint32_t q_width = (shape.q_gated ? 2 : 1) * shape.heads * hd;
  const uint64_t row_stride = q_width + 2 * uint64_t(shape.kv_heads) * hd;
  const uint32_t lane = threadIdx.x % 32;
  const uint64_t item = uint64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (item >= uint64_t(rows) * slots) return;
  const uint64_t row = item / slots;
  const uint32_t slot = uint32_t(item - row * slots);
  const uint64_t at = slot < shape.heads ? uint64_t(slot) * hd * (shape.q_gated ? 2 : 1)
                                         : q_width + uint64_t(slot - shape.heads) * hd;
  const float* src = qkv + row * row_stride + at;
  const float* bias = qkv_bias ? qkv_bias + uint64_t(slot) * hd : nullptr;
  if (slot >= shape.heads + shape.kv_heads) {
    Bf16* dst = v + (row * shape.kv_heads + (slot - shape.heads - shape.kv_heads)) * hd;
    for (uint32_t i = lane; i < hd; i += 32) dst[i] = to_bf16(bias ? src[i] + bias[i] : src[i]);
    return;
  }
  const bool is_q = slot < shape.heads;
  const float* norm = is_q ? q_norm : k_norm;
  Bf16* dst = is_q ? q + (row * shape.heads + slot) * hd
                   : k + (row * shape.kv_heads + (slot - shape.heads)) * hd;
  const uint32_t rot = shape.rotary_dim ? shape.rotary_dim : hd;
  const uint32_t half = rot / 2;
  const uint32_t items = half + (hd - rot);  // pairs, then the dims past rot one by one
  // Item n < half: dims n and n + half; item n >= half: dim rot + (n - half) alone.
  float a[kItemsPerLane], b[kItemsPerLane];
  float squares = 0;
#pragma unroll
  for (int j = 0; j < kItemsPerLane; ++j) {
    const uint32_t n = lane + 32 * j;
    const uint32_t i = n < half ? n : rot + (n - half);
    const bool pair = n < half;
    a[j] = n < items ? src[i] + (bias ? bias[i] : 0.0f) : 0.0f;
    b[j] = pair ? src[i + half] + (bias ? bias[i + half] : 0.0f) : 0.0f;
    squares += a[j] * a[j] + b[j] * b[j];
  }
  float scale = 1.0f;
  if (norm) {
    for (int offset = 16; offset > 0; offset >>= 1)
      squares += __shfl_xor_sync(0xFFFFFFFFu, squares, offset);
    scale = 1.0f / sqrtf(squares / float(hd) + shape.eps);
  }
  const float* c = cos + row * half;
  const float* s = sin + row * half;
#pragma unroll
  for (int j = 0; j < kItemsPerLane; ++j) {
    const uint32_t n = lane + 32 * j;
    if (n >= items) break;
    if (n < half) {
      float x = a[j], y = b[j];
      if (norm) {
        x = x * scale * norm[n];
        y = y * scale * norm[n + half];
      }
      dst[n] = to_bf16(x * c[n] - y * s[n]);
      dst[n + half] = to_bf16(y * c[n] + x * s[n]);
    } else {
      const uint32_t i = rot + (n - half);
      dst[i] = to_bf16(norm ? a[j] * scale * norm[i] : a[j]);
    }
  }
}

__global__ void output_gate_kernel(const float* __restrict__ qkv, uint64_t qkv_stride,
                                   uint32_t rows, uint32_t heads, uint32_t head_dim,
                                   Bf16* __restrict__ attn) {
  const uint32_t width = heads * head_dim;
  const uint64_t total = uint64_t(rows) * width;
  for (uint64_t e = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t r = e / width;
    const auto col = uint32_t(e - r * width);
    const uint32_t h = col / head_dim;
    const float gate = qkv[r * qkv_stride + uint64_t(2 * h + 1) * head_dim + (col - h * head_dim)];
    attn[e] = to_bf16(to_float(attn[e]) / (1.0f + expf(-gate)));
  }
}

__device__ __forceinline__ float silu_times(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// kVec 8: 16-byte loads and stores (inter a multiple of 8); kVec 1 for any other shape.
template <int kVec>
__global__ void swiglu_kernel(const Bf16* __restrict__ gate_up, uint32_t rows, uint32_t inter,
                              Bf16* __restrict__ act) {
  const uint32_t per_row = inter / kVec;
  const uint64_t total = uint64_t(rows) * per_row;
  for (uint64_t e = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t r = e / per_row;
    const uint64_t i = (e - r * per_row) * kVec;
    const Bf16* g = gate_up + r * 2 * inter + i;
    if constexpr (kVec == 1) {
      act[r * inter + i] = to_bf16(silu_times(to_float(g[0]), to_float(g[inter])));
    } else {
      union Pack {
        uint4 vector;
        Bf16 lanes[8];
      } gp, up, out;
      gp.vector = *reinterpret_cast<const uint4*>(g);
      up.vector = *reinterpret_cast<const uint4*>(g + inter);
#pragma unroll
      for (int k = 0; k < 8; ++k)
        out.lanes[k] = to_bf16(silu_times(to_float(gp.lanes[k]), to_float(up.lanes[k])));
      *reinterpret_cast<uint4*>(act + r * inter + i) = out.vector;
    }
  }
}

template <class Out>
__device__ __forceinline__ Out convert(float value);
template <>
__device__ __forceinline__ float convert<float>(float value) {
  return value;
}
template <>
__device__ __forceinline__ __nv_bfloat16 convert<__nv_bfloat16>(float value) {
  return __float2bfloat16_rn(value);
}
template <>
__device__ __forceinline__ __half convert<__half>(float value) {
  return __float2half_rn(value);
}

template <class Out>
__global__ void capture_kernel(const float* __restrict__ x, uint32_t rows, uint32_t dim,
                               unsigned char* __restrict__ dst, uint64_t row_pitch) {
  const uint64_t total = uint64_t(rows) * dim;
  for (uint64_t e = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t t = e / dim;
    reinterpret_cast<Out*>(dst + t * row_pitch)[e - t * dim] = convert<Out>(x[e]);
  }
}

// Is (value, index) ahead of (best, best_index) in the order "larger value, then smaller
// index"? `n` marks "nothing yet". A total order, so any reduction tree picks the same one.
__device__ __forceinline__ bool ahead(float value, uint32_t index, float best, uint32_t best_index,
                                      uint32_t n) {
  if (index == n) return false;
  if (best_index == n) return true;
  return value > best || (value == best && index < best_index);
}

__global__ void argmax_kernel(const float* __restrict__ logits, uint32_t rows, uint32_t n,
                              int32_t* __restrict__ out) {
  __shared__ float best_values[kWarps];
  __shared__ uint32_t best_indices[kWarps];
  for (uint32_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* x = logits + uint64_t(row) * n;
    float best = -INFINITY;
    uint32_t best_index = n;
    for (uint32_t i = threadIdx.x; i < n; i += kThreads) {
      const float value = x[i];
      if (!isnan(value) && ahead(value, i, best, best_index, n)) {
        best = value;
        best_index = i;
      }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float other = __shfl_xor_sync(0xFFFFFFFFu, best, offset);
      const uint32_t other_index = __shfl_xor_sync(0xFFFFFFFFu, best_index, offset);
      if (ahead(other, other_index, best, best_index, n)) {
        best = other;
        best_index = other_index;
      }
    }
    if (threadIdx.x % 32 == 0) {
      best_values[threadIdx.x / 32] = best;
      best_indices[threadIdx.x / 32] = best_index;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kWarps; ++w)
        if (ahead(best_values[w], best_indices[w], best, best_index, n)) {
          best = best_values[w];
          best_index = best_indices[w];
        }
      out[row] = best_index == n ? 0 : int32_t(best_index);
    }
    __syncthreads();
  }
}

// random_uniform of model_weights.cc: splitmix64's output for state key + (i + 1) * golden.
__device__ __forceinline__ float random_uniform(uint64_t key, uint64_t i) {
  uint64_t z = key + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return float(int64_t(z >> 40) - (1 << 23)) / float(1 << 23);
}

template <class Out>
__global__ void random_fill_kernel(Out* __restrict__ dst, uint64_t count, uint64_t key, float scale,
                                   float offset) {
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += uint64_t(gridDim.x) * blockDim.x) {
    // Separate multiply and add, as the host does (no fused multiply-add).
    dst[i] = convert<Out>(__fadd_rn(offset, __fmul_rn(scale, random_uniform(key, i))));
  }
}

__global__ void to_bf16_kernel(const float* __restrict__ src, uint64_t count,
                               __nv_bfloat16* __restrict__ dst) {
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += uint64_t(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16_rn(src[i]);
}

// dst row dst_rows[r] = src row r, `words` 32-bit words a row (bf16 pairs).
__global__ void scatter_rows_kernel(const uint32_t* __restrict__ src,
                                    const int32_t* __restrict__ dst_rows, uint32_t rows,
                                    uint32_t words, uint32_t* __restrict__ dst) {
  const uint64_t count = uint64_t(rows) * words;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t r = i / words, w = i % words;
    dst[uint64_t(dst_rows[r]) * words + w] = src[i];
  }
}

// dst row r = src row src_rows[r].
__global__ void gather_rows_kernel(const uint32_t* __restrict__ src,
                                   const int32_t* __restrict__ src_rows, uint32_t rows,
                                   uint32_t words, uint32_t* __restrict__ dst) {
  const uint64_t count = uint64_t(rows) * words;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t r = i / words, w = i % words;
    dst[i] = src[uint64_t(src_rows[r]) * words + w];
  }
}

}  // namespace

cudaError_t launch_scatter_rows(const Bf16* src, const int32_t* dst_rows, uint32_t rows,
                                uint32_t width, Bf16* dst, cudaStream_t stream) {
  const uint64_t count = uint64_t(rows) * (width / 2);
  scatter_rows_kernel<<<grid_for(count), kThreads, 0, stream>>>(
      reinterpret_cast<const uint32_t*>(src), dst_rows, rows, width / 2,
      reinterpret_cast<uint32_t*>(dst));
  return cudaGetLastError();
}

cudaError_t launch_gather_rows(const Bf16* src, const int32_t* src_rows, uint32_t rows,
                               uint32_t width, Bf16* dst, cudaStream_t stream) {
  const uint64_t count = uint64_t(rows) * (width / 2);
  gather_rows_kernel<<<grid_for(count), kThreads, 0, stream>>>(
      reinterpret_cast<const uint32_t*>(src), src_rows, rows, width / 2,
      reinterpret_cast<uint32_t*>(dst));
  return cudaGetLastError();
}

cudaError_t launch_embed(const Bf16* embed, const int32_t* tokens, uint32_t rows, uint32_t hidden,
                         float* residual, cudaStream_t stream) {
  embed_kernel<<<grid_for(uint64_t(rows) * hidden), kThreads, 0, stream>>>(embed, tokens, rows,
                                                                           hidden, residual);
  return cudaGetLastError();
}

cudaError_t launch_rms_norm(const float* x, const float* weight, uint32_t rows, uint32_t dim,
                            float eps, Bf16* y, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (dim % 4 == 0 && dim <= kCachedRow)
    rms_norm_cached_kernel<<<row_grid(rows), kThreads, 0, stream>>>(x, weight, rows, dim, eps, y);
  else if (dim % 4 == 0)
    rms_norm_kernel<true><<<row_grid(rows), kThreads, 0, stream>>>(x, weight, rows, dim, eps, y);
  else
    rms_norm_kernel<false><<<row_grid(rows), kThreads, 0, stream>>>(x, weight, rows, dim, eps, y);
  return cudaGetLastError();
}

cudaError_t launch_rope_table(const int32_t* positions, uint32_t rows, const double* inv_freq,
                              const double* row_bases, double scale, uint32_t half, float* cos,
                              float* sin, cudaStream_t stream) {
  rope_table_kernel<<<grid_for(uint64_t(rows) * half), kThreads, 0, stream>>>(
      positions, rows, inv_freq, row_bases, scale, half, cos, sin);
  return cudaGetLastError();
}

cudaError_t launch_qkv_finish(const float* qkv, uint32_t rows, QkvShape shape,
                              const float* qkv_bias, const float* q_norm, const float* k_norm,
                              const float* cos, const float* sin, Bf16* q, Bf16* k, Bf16* v,
                              cudaStream_t stream) {
  const uint32_t rot = shape.rotary_dim ? shape.rotary_dim : shape.head_dim;
  if (shape.head_dim > 256 || shape.head_dim % 2 != 0 || rot % 2 != 0 || rot > shape.head_dim ||
      rot / 2 + (shape.head_dim - rot) > 32u * kItemsPerLane)
    return cudaErrorInvalidValue;
  const uint64_t warps = uint64_t(rows) * (shape.heads + 2 * shape.kv_heads);
  if (warps == 0) return cudaSuccess;
  const uint64_t blocks = (warps + kWarps - 1) / kWarps;
  if (blocks > 0x7FFFFFFFull) return cudaErrorInvalidValue;
  qkv_finish_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(qkv, rows, shape, qkv_bias, q_norm,
                                                               k_norm, cos, sin, q, k, v);
  return cudaGetLastError();
}

cudaError_t launch_output_gate(const float* qkv, uint64_t qkv_stride, uint32_t rows, uint32_t heads,
                               uint32_t head_dim, Bf16* attn, cudaStream_t stream) {
  const uint64_t total = uint64_t(rows) * heads * head_dim;
  if (total == 0) return cudaSuccess;
  output_gate_kernel<<<grid_for(total), kThreads, 0, stream>>>(qkv, qkv_stride, rows, heads,
                                                               head_dim, attn);
  return cudaGetLastError();
}

cudaError_t launch_swiglu(const Bf16* gate_up, uint32_t rows, uint32_t inter, Bf16* act,
                          cudaStream_t stream) {
  if (inter % 8 == 0)
    swiglu_kernel<8>
        <<<grid_for(uint64_t(rows) * inter / 8), kThreads, 0, stream>>>(gate_up, rows, inter, act);
  else
    swiglu_kernel<1>
        <<<grid_for(uint64_t(rows) * inter), kThreads, 0, stream>>>(gate_up, rows, inter, act);
  return cudaGetLastError();
}

cudaError_t launch_capture(const float* x, uint32_t rows, uint32_t dim, DType dtype, void* dst,
                           uint64_t row_pitch_bytes, cudaStream_t stream) {
  const unsigned grid = grid_for(uint64_t(rows) * dim);
  auto* out = static_cast<unsigned char*>(dst);
  switch (dtype) {
    case DType::kBF16:
      capture_kernel<__nv_bfloat16>
          <<<grid, kThreads, 0, stream>>>(x, rows, dim, out, row_pitch_bytes);
      break;
    case DType::kFP16:
      capture_kernel<__half><<<grid, kThreads, 0, stream>>>(x, rows, dim, out, row_pitch_bytes);
      break;
    case DType::kFP32:
      capture_kernel<float><<<grid, kThreads, 0, stream>>>(x, rows, dim, out, row_pitch_bytes);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_argmax(const float* logits, uint32_t rows, uint32_t n, int32_t* out,
                          cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  argmax_kernel<<<row_grid(rows), kThreads, 0, stream>>>(logits, rows, n, out);
  return cudaGetLastError();
}

cudaError_t launch_random_fill(Bf16* dst, uint64_t count, uint64_t key, float scale, float offset,
                               cudaStream_t stream) {
  random_fill_kernel<__nv_bfloat16><<<grid_for(count), kThreads, 0, stream>>>(
      reinterpret_cast<__nv_bfloat16*>(dst), count, key, scale, offset);
  return cudaGetLastError();
}

cudaError_t launch_random_fill(float* dst, uint64_t count, uint64_t key, float scale, float offset,
                               cudaStream_t stream) {
  random_fill_kernel<float>
      <<<grid_for(count), kThreads, 0, stream>>>(dst, count, key, scale, offset);
  return cudaGetLastError();
}

cudaError_t launch_to_bf16(const float* src, uint64_t count, Bf16* dst, cudaStream_t stream) {
  to_bf16_kernel<<<grid_for(count), kThreads, 0, stream>>>(src, count,
                                                           reinterpret_cast<__nv_bfloat16*>(dst));
  return cudaGetLastError();
}

}  // namespace hsring::cuda_ops
