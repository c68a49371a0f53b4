// The element-wise and row-wise kernels that only the CUDA forward has (attention is in
// cuda_attention.cu; the shared ops in gpu/ops/).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "gpu/bf16.cuh"
#include "gpu/block_reduce.cuh"
#include "gpu/launch_grid.h"
#include "model/cuda_kernels.h"

namespace hsring {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

unsigned grid_for(uint64_t work_items) { return gpu::grid_stride_blocks(work_items, kThreads); }

constexpr uint32_t kMaxHeadDim = 256;

// The layer's shape as the finishing kernel reads it: 32-bit counts for its index math, the
// norm's epsilon in fp32.
struct QkvShape {
  uint32_t heads = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  float eps = 0;
  uint32_t rotary_dim = 0;  // RoPE on the first rotary_dim dims of a head (0: all of them)
  bool q_gated = false;     // Qwen3.5: each q head is followed by its output gate's values
};

// The (row, slot) head of q, k and v that warp `item` finishes: slots are the q heads, then
// k's, then v's.
struct QkvHead {
  uint64_t row = 0;
  uint32_t slot = 0;
  bool is_q = false, is_k = false;
  const Bf16* src = nullptr;  // in qkv
  Bf16* dst = nullptr;        // in q, k or v
};

// False past the last head. head_dim: shape.head_dim, or the caller's constant for it.
__device__ __forceinline__ bool locate_head(uint64_t item, uint32_t rows, const QkvShape& shape,
                                            uint32_t head_dim, const Bf16* qkv, Bf16* q, Bf16* k,
                                            Bf16* v, QkvHead& head) {
  const uint32_t slots = shape.heads + 2 * shape.kv_heads;
  if (item >= uint64_t(rows) * slots) return false;
  const uint32_t q_width = (shape.q_gated ? 2 : 1) * shape.heads * head_dim;
  const uint64_t row_stride = q_width + 2 * uint64_t(shape.kv_heads) * head_dim;
  const uint64_t row = item / slots;
  const auto slot = uint32_t(item - row * slots);
  head.row = row;
  head.slot = slot;
  head.is_q = slot < shape.heads;
  head.is_k = !head.is_q && slot < shape.heads + shape.kv_heads;
  const uint64_t at = head.is_q ? uint64_t(slot) * head_dim * (shape.q_gated ? 2 : 1)
                                : q_width + uint64_t(slot - shape.heads) * head_dim;
  head.src = qkv + row * row_stride + at;
  head.dst = head.is_q ? q + (row * shape.heads + slot) * head_dim
             : head.is_k
                 ? k + (row * shape.kv_heads + (slot - shape.heads)) * head_dim
                 : v + (row * shape.kv_heads + (slot - shape.heads - shape.kv_heads)) * head_dim;
  return true;
}

// One warp per (row, head) of q, k and v. The head is read in pairs (4 bytes a lane: a
// warp's load is 128 contiguous bytes), summed for the norm, and staged in the warp's
// shared row, so that RoPE finds each value's partner (i +- rotary_dim / 2) wherever it
// fell; then written in bf16 pairs. head_dim is even (launch_qkv_finish), so every pair
// lies in one head and every array holds pairs at even offsets. Warp-uniform branches only:
// the shuffles of the norm see every lane.
__global__ void qkv_finish_kernel(const Bf16* __restrict__ qkv, uint32_t rows, QkvShape shape,
                                  const float* __restrict__ qkv_bias,
                                  const float* __restrict__ q_norm,
                                  const float* __restrict__ k_norm, const float* __restrict__ cos,
                                  const float* __restrict__ sin, Bf16* __restrict__ q,
                                  Bf16* __restrict__ k, Bf16* __restrict__ v) {
  __shared__ float staged[kWarps][kMaxHeadDim];
  const uint32_t hd = shape.head_dim;
  const uint32_t lane = threadIdx.x % 32;
  QkvHead at;
  if (!locate_head(uint64_t(blockIdx.x) * kWarps + threadIdx.x / 32, rows, shape, hd, qkv, q, k, v,
                   at))
    return;
  const uint64_t row = at.row;
  const Bf16* src = at.src;
  Bf16* dst = at.dst;
  const float* bias = qkv_bias ? qkv_bias + uint64_t(at.slot) * hd : nullptr;
  const bool is_q = at.is_q, is_k = at.is_k, is_v = !is_q && !is_k;
  const float* norm = is_q ? q_norm : is_k ? k_norm : nullptr;
  float* head = staged[threadIdx.x / 32];
  float squares = 0;
  for (uint32_t i = 2 * lane; i < hd; i += 64) {
    float2 x = gpu::unpack_bf16(*reinterpret_cast<const uint32_t*>(src + i));
    if (bias) {
      x.x += bias[i];
      x.y += bias[i + 1];
    }
    if (is_v) {  // rounded as it is
      reinterpret_cast<uint32_t*>(dst)[i / 2] = gpu::bf16_pair(x.x, x.y);
      continue;
    }
    squares += x.x * x.x + x.y * x.y;
    head[i] = x.x;
    head[i + 1] = x.y;
  }
  if (is_v) return;
  const float scale = norm ? 1.0f / sqrtf(gpu::warp_sum(squares) / float(hd) + shape.eps) : 1.0f;
  __syncwarp();
  // Element i after the norm: (x_i * scale) * w_i, as the CPU reference multiplies.
  const auto normed = [&](uint32_t i) { return norm ? head[i] * scale * norm[i] : head[i]; };
  const uint32_t rot = shape.rotary_dim ? shape.rotary_dim : hd;
  const uint32_t half = rot / 2;
  const float* c = cos + row * half;
  const float* s = sin + row * half;
  const auto rotated = [&](uint32_t i) {
    if (i < half) return normed(i) * c[i] - normed(i + half) * s[i];
    if (i < rot) return normed(i) * c[i - half] + normed(i - half) * s[i - half];
    return normed(i);
  };
  for (uint32_t i = 2 * lane; i < hd; i += 64)
    reinterpret_cast<uint32_t*>(dst)[i / 2] = gpu::bf16_pair(rotated(i), rotated(i + 1));
}

// The same finishing where RoPE rotates the whole head and head_dim is 128 or 256: each value's
// partner (i +- head_dim / 2) is then in the same lane, kPairs / 2 pairs away, so nothing is
// staged and the norm weights and angles are read in pairs. The staged kernel above spends
// most of its time issuing instructions, not waiting on memory (bench/RESULTS.md, "q/k/v
// finishing").
template <uint32_t kPairs>  // head_dim / 64
__global__ void qkv_finish_in_lane_kernel(const Bf16* __restrict__ qkv, uint32_t rows,
                                          QkvShape shape, const float* __restrict__ qkv_bias,
                                          const float* __restrict__ q_norm,
                                          const float* __restrict__ k_norm,
                                          const float* __restrict__ cos,
                                          const float* __restrict__ sin, Bf16* __restrict__ q,
                                          Bf16* __restrict__ k, Bf16* __restrict__ v) {
  constexpr uint32_t kHeadDim = 64 * kPairs, kHalf = kHeadDim / 2;
  const uint32_t lane = threadIdx.x % 32;
  QkvHead at;
  if (!locate_head(uint64_t(blockIdx.x) * kWarps + threadIdx.x / 32, rows, shape, kHeadDim, qkv, q,
                   k, v, at))
    return;
  const uint64_t row = at.row, slot = at.slot;
  const bool is_q = at.is_q, is_k = at.is_k;
  const Bf16* src = at.src;
  Bf16* dst = at.dst;
  // Lane l holds elements 2 l + 64 p, p < kPairs.
  float2 x[kPairs];
#pragma unroll
  for (uint32_t p = 0; p < kPairs; ++p)
    x[p] = gpu::unpack_bf16(*reinterpret_cast<const uint32_t*>(src + 2 * lane + 64 * p));
  if (qkv_bias) {
    const float* bias = qkv_bias + uint64_t(slot) * kHeadDim;
#pragma unroll
    for (uint32_t p = 0; p < kPairs; ++p) {
      const float2 b = *reinterpret_cast<const float2*>(bias + 2 * lane + 64 * p);
      x[p].x += b.x;
      x[p].y += b.y;
    }
  }
  auto* out = reinterpret_cast<uint32_t*>(dst);
  if (!is_q && !is_k) {  // v: rounded as it is
#pragma unroll
    for (uint32_t p = 0; p < kPairs; ++p) out[lane + 32 * p] = gpu::bf16_pair(x[p].x, x[p].y);
    return;
  }
  const float* norm = is_q ? q_norm : k_norm;
  if (norm) {
    float squares = 0;
#pragma unroll
    for (uint32_t p = 0; p < kPairs; ++p) squares += x[p].x * x[p].x + x[p].y * x[p].y;
    const float scale = 1.0f / sqrtf(gpu::warp_sum(squares) / float(kHeadDim) + shape.eps);
    // (x_i * scale) * w_i, as the CPU reference multiplies.
#pragma unroll
    for (uint32_t p = 0; p < kPairs; ++p) {
      const float2 w = *reinterpret_cast<const float2*>(norm + 2 * lane + 64 * p);
      x[p].x = x[p].x * scale * w.x;
      x[p].y = x[p].y * scale * w.y;
    }
  }
  // Pair p < kPairs / 2 holds elements below half: rotated with pair p + kPairs / 2, the
  // angles of elements 2 l + 64 p and the one after.
#pragma unroll
  for (uint32_t p = 0; p < kPairs / 2; ++p) {
    const uint32_t i = 2 * lane + 64 * p;
    const float2 c = *reinterpret_cast<const float2*>(cos + row * kHalf + i);
    const float2 s = *reinterpret_cast<const float2*>(sin + row * kHalf + i);
    const float2 lo = x[p], hi = x[p + kPairs / 2];
    out[lane + 32 * p] = gpu::bf16_pair(lo.x * c.x - hi.x * s.x, lo.y * c.y - hi.y * s.y);
    out[lane + 32 * (p + kPairs / 2)] =
        gpu::bf16_pair(hi.x * c.x + lo.x * s.x, hi.y * c.y + lo.y * s.y);
  }
}

constexpr int kGateThreads = 128;

// One block per (head, row), rows strided over grid.y; a thread per bf16 pair of the head
// (head_dim is even). No index division: the gate's columns follow the head's.
__global__ void output_gate_kernel(const Bf16* __restrict__ qkv, uint64_t qkv_stride, uint32_t rows,
                                   uint32_t heads, uint32_t head_dim, Bf16* __restrict__ attn) {
  const uint32_t h = blockIdx.x;
  for (uint64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const Bf16* gate = qkv + r * qkv_stride + uint64_t(2 * h + 1) * head_dim;
    auto* out = reinterpret_cast<uint32_t*>(attn + (r * heads + h) * head_dim);
    for (uint32_t i = 2 * threadIdx.x; i < head_dim; i += 2 * kGateThreads) {
      const float2 g = gpu::unpack_bf16(*reinterpret_cast<const uint32_t*>(gate + i));
      const float2 a = gpu::unpack_bf16(out[i / 2]);
      out[i / 2] = gpu::bf16_pair(a.x / (1.0f + expf(-g.x)), a.y / (1.0f + expf(-g.y)));
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
  return __ushort_as_bfloat16(gpu::float_to_bf16(value));
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

}  // namespace

bool qkv_finish_kernel_runs(QkvFinishKernel kernel, const DecoderLayerShape& layer) {
  if (kernel != QkvFinishKernel::kInLane) return true;
  const bool whole_head = layer.rotary_dim == 0 || layer.rotary_dim == layer.head_dim;
  return whole_head && (layer.head_dim == 128 || layer.head_dim == 256);
}

cudaError_t launch_qkv_finish(const Bf16* qkv, uint32_t rows, const DecoderLayerShape& layer,
                              const float* qkv_bias, const float* q_norm, const float* k_norm,
                              const float* cos, const float* sin, Bf16* q, Bf16* k, Bf16* v,
                              cudaStream_t stream, QkvFinishKernel kernel) {
  // Past these the 32-bit copy would wrap: refused before it is made.
  if (layer.head_dim > kMaxHeadDim || layer.rotary_dim > layer.head_dim ||
      layer.heads + 2 * layer.kv_heads > UINT32_MAX)
    return cudaErrorInvalidValue;
  QkvShape shape;
  shape.heads = uint32_t(layer.heads);
  shape.kv_heads = uint32_t(layer.kv_heads);
  shape.head_dim = uint32_t(layer.head_dim);
  shape.eps = float(layer.eps);
  shape.rotary_dim = uint32_t(layer.rotary_dim);
  shape.q_gated = layer.attention_gate;
  const uint32_t rot = shape.rotary_dim ? shape.rotary_dim : shape.head_dim;
  if (shape.head_dim % 2 != 0 || rot % 2 != 0) return cudaErrorInvalidValue;
  const uint64_t warps = uint64_t(rows) * (shape.heads + 2 * shape.kv_heads);
  if (warps == 0) return cudaSuccess;
  const uint64_t blocks = (warps + kWarps - 1) / kWarps;
  if (blocks > 0x7FFFFFFFull) return cudaErrorInvalidValue;
  if (!qkv_finish_kernel_runs(kernel, layer)) return cudaErrorNotSupported;
  const auto launch = kernel != QkvFinishKernel::kInLane ? qkv_finish_kernel
                      : shape.head_dim == 128            ? qkv_finish_in_lane_kernel<2>
                                                         : qkv_finish_in_lane_kernel<4>;
  launch<<<unsigned(blocks), kThreads, 0, stream>>>(qkv, rows, shape, qkv_bias, q_norm, k_norm, cos,
                                                    sin, q, k, v);
  return cudaGetLastError();
}

cudaError_t launch_output_gate(const Bf16* qkv, uint64_t qkv_stride, uint32_t rows, uint32_t heads,
                               uint32_t head_dim, Bf16* attn, cudaStream_t stream) {
  if (head_dim % 2 != 0) return cudaErrorInvalidValue;
  if (uint64_t(rows) * heads * head_dim == 0) return cudaSuccess;
  output_gate_kernel<<<dim3(heads, std::min(rows, 65535u)), kGateThreads, 0, stream>>>(
      qkv, qkv_stride, rows, heads, head_dim, attn);
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

}  // namespace hsring
