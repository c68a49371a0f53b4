// Device pieces the chunked delta rule's kernels share in every precision
// (model/cuda_delta_rule.cu, model/cuda_delta_prepare_bf16.cu, model/cuda_delta_state_bf16.cu):
// the head dims the bf16 kernels are compiled for, a chunk's gates, the inverse of a diagonal
// block of its triangular system, and the cp.async copy of a chunk's rows into shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/cp_async.cuh"
#include "gpu/mma.cuh"
#include "model/cuda_delta_net.h"

namespace hsring {

// The side of the diagonal blocks the chunk's system is inverted by.
inline constexpr int kDeltaBlock = 16;

// The bf16 kernels are compiled twice: once with the head dims every Qwen3.5 / 3.6 model has
// as constants (strides, offsets and loop bounds fold into immediates: at the qwen3.6-27b
// shape 14 % fewer instructions in pass 1, 26 % in pass 2), once reading them from the
// shape. kFixed 0: the shape's.
inline constexpr int kDeltaFixedHeadDim = 128;
inline bool delta_fixed_head_dims(const DeltaNetShape& shape) {
  return shape.qk_head_dim == kDeltaFixedHeadDim && shape.v_head_dim == kDeltaFixedHeadDim;
}
template <int kFixed>
__device__ __forceinline__ int head_dim_or(uint32_t from_shape) {
  return kFixed != 0 ? kFixed : int(from_shape);
}

// One warp's running sums of g over a chunk (two tokens a lane: g0, g1 of tokens 2 lane and
// 2 lane + 1), G_i, into sums [kDeltaChunk].
__device__ __forceinline__ void chunk_running_sums(float g0, float g1, int lane, float* sums) {
  float sum = g0 + g1;
  for (int offset = 1; offset < 32; offset <<= 1) {
    const float before = __shfl_up_sync(0xFFFFFFFFu, sum, offset);
    if (lane >= offset) sum += before;
  }
  sums[2 * lane] = sum - g1;
  sums[2 * lane + 1] = sum;
}

// For warp 0 of a block (`lane` its lane): G_i, the running sum of g over the chunk's tokens
// in order (two tokens a lane), into g_s, and beta into b_s, [kDeltaChunk] each; tokens past
// `len` count as g = 0, beta = 0. g and beta are [rows, vh]; c0 is the chunk's first row, h
// its value head.
__device__ __forceinline__ void load_chunk_gates(const float* __restrict__ g,
                                                 const float* __restrict__ beta, int c0, int len,
                                                 int vh, int h, int lane, float* g_s, float* b_s) {
  const int r = 2 * lane;
  const float g0 = r < len ? g[uint64_t(c0 + r) * vh + h] : 0.0f;
  const float g1 = r + 1 < len ? g[uint64_t(c0 + r + 1) * vh + h] : 0.0f;
  chunk_running_sums(g0, g1, lane, g_s);
  b_s[r] = r < len ? beta[uint64_t(c0 + r) * vh + h] : 0.0f;
  b_s[r + 1] = r + 1 < len ? beta[uint64_t(c0 + r + 1) * vh + h] : 0.0f;
}

// Column c of (I + A)^-1 for one kDeltaBlock-square diagonal block, A's strictly lower part
// at `a` (row stride lda; its diagonal and upper part are not read), into x, by forward
// substitution with the column in registers: the chain of dependent steps is register FMAs,
// not shared-memory round trips. The rows above the diagonal come out zero, as their terms
// all are.
__device__ __forceinline__ void unit_lower_inverse_column(const float* a, int lda, int c,
                                                          float (&x)[kDeltaBlock]) {
#pragma unroll
  for (int r = 0; r < kDeltaBlock; ++r) {
    float v = r == c ? 1.0f : 0.0f;
#pragma unroll
    for (int j = 0; j < r; ++j) v = fmaf(-a[r * lda + j], x[j], v);
    x[r] = v;
  }
}

// Starts copying rows r < rows, columns c < columns of src (row stride `stride`) into the
// shared tile [kDeltaChunk][ld] by the block's kThreads threads, zero-filling the tile's other
// rows and its columns up to `width`. Columns, width and row starts are whole 16-byte pieces.
// The caller commits, waits and synchronises before reading.
template <int kThreads, class T>
__device__ __forceinline__ void copy_chunk_rows(T* dst, int ld, int width, const T* src,
                                                uint64_t stride, int rows, int columns) {
  constexpr int kPiece = 16 / int(sizeof(T));
  const int pieces = width / kPiece;
  for (int e = int(threadIdx.x); e < int(kDeltaChunk) * pieces; e += kThreads) {
    const int r = e / pieces, c = (e % pieces) * kPiece;
    const bool valid = r < rows && c < columns;
    gpu::cp_async16(dst + r * ld + c, valid ? src + uint64_t(r) * stride + c : src, valid);
  }
}

}  // namespace hsring
