// Pass 2 of the chunked gated delta rule with bf16 operands (launch_delta_rule; the
// algebra is in model/cuda_delta_net.h, pass 1 in model/cuda_delta_prepare_bf16.cu).
//
// One block of eight warps per (document, value head, 64 state columns) walks the document's
// chunks in order. Each chunk step is three rounds of mma.sync m16n8k16 bf16 products with
// fp32 accumulation, the operands read from shared memory with ldmatrix:
//   1. U = U' - W S and Q S, sharing S's fragments (a warp: 16 token rows, 32 columns);
//   2. O = diag(gamma) (Q S) + P U, P causal (a warp reads U's rows up to its own);
//   3. S = gamma_L S + K^T (diag(gamma_L / gamma) U) (a warp: 32 state rows, 32 columns).
// The decays scale the products' rows (O's, U's copy for step 3), not Q and K, so Q and K
// are read as the convolution wrote them, by each value head of their q/k head. The state's
// fp32 value stays in the registers of the warp that updates it; shared memory holds its
// bf16 operand copy and U's two. Every operand is bf16 in memory (Q and K the
// convolution's, W, P and U' pass 1's), so a chunk's tiles are cp.async copies that start as soon
// as the step before is done with their buffers. Two blocks to an SM: while one waits on its copies
// or a barrier, the other's products run (flash-linear-attention's chunk_fwd_h is laid out alike).
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/bf16.cuh"
#include "gpu/cp_async.cuh"
#include "gpu/mma.cuh"
#include "model/cuda_delta_chunk.cuh"
#include "model/cuda_delta_rule_passes.h"

namespace hsring {

namespace {

constexpr int kChunk = int(kDeltaChunk);
constexpr int kColumns = 64;  // state columns per block
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// A warp's share of the block's 64 x kColumns products: 16 token rows (U, O) or 32 state
// rows (S) by half the columns, kWarpTiles tiles of 8.
constexpr int kWarpColumns = kColumns / 2;
constexpr int kWarpTiles = kWarpColumns / 8;
// Row padding (bf16 values): rows 16 bytes apart modulo 128, so the 8 rows an ldmatrix reads
// fall on different banks.
constexpr int kPad = 8;
constexpr int kWideStride = kChunk + kPad;  // P, U and S rows (kChunk == kColumns)
static_assert(kChunk == kColumns, "P, U and S share a row stride");
static_assert(kWarps / 2 * 16 == kChunk, "two warps per 16 token rows");
static_assert(kWarps / 2 * 32 >= int(kDeltaMaxHeadDim), "two warps per 32 state rows");

__host__ __device__ constexpr int round16(int n) { return (n + 15) / 16 * 16; }

// Shared memory (bf16 values): W, Q, K [kChunk][ks]; P, U and diag(gamma_L / gamma) U
// [kChunk][kWideStride]; S [dkp][kWideStride].
struct Layout {
  int dkp, ks;
  __host__ __device__ explicit Layout(int dk) : dkp(round16(dk)), ks(round16(dk) + kPad) {}
  __host__ __device__ size_t values() const {
    return size_t(3) * kChunk * ks + size_t(3) * kChunk * kWideStride + size_t(dkp) * kWideStride;
  }
};

using Tile = float[4];  // a warp's 16 x 8 fp32 accumulator: rows g and g + 8, columns 2t, 2t + 1

// acc[n] += a B[:, 8 n .. 8 n + 7] for the kWarpColumns columns of B's 16 rows at b_rows.
__device__ __forceinline__ void accumulate_row(Tile* acc, const uint32_t* a, const Bf16* b_rows,
                                               int lane) {
#pragma unroll
  for (int n = 0; n < kWarpTiles; n += 2)
    gpu::mma_bf16_tile16(acc[n], acc[n + 1], a, b_rows + n * 8, kWideStride, lane);
}

// Writes the warp's 16 x kWarpColumns accumulators, rounded, to the shared tile at `rows`
// (row stride kWideStride), rows g and g + 8 scaled by top and bottom.
__device__ __forceinline__ void store_operand(const Tile* acc, Bf16* rows, float top, float bottom,
                                              int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int n = 0; n < kWarpTiles; ++n) {
    Bf16* at = rows + g * kWideStride + n * 8 + 2 * t;
    *reinterpret_cast<uint32_t*>(at) = gpu::pack_bf16(top * acc[n][0], top * acc[n][1]);
    *reinterpret_cast<uint32_t*>(at + 8 * kWideStride) =
        gpu::pack_bf16(bottom * acc[n][2], bottom * acc[n][3]);
  }
}

template <int kFixedDims>
__global__ void __launch_bounds__(kThreads, 2)
    delta_state_bf16_kernel(const Bf16* __restrict__ qkv, DeltaNetShape shape,
                            const DeltaSpan* __restrict__ documents, DeltaScratch scratch,
                            Bf16* __restrict__ out) {
  extern __shared__ __align__(128) Bf16 smem[];
  const int dk = head_dim_or<kFixedDims>(shape.qk_head_dim);
  const int dv = head_dim_or<kFixedDims>(shape.v_head_dim), vh = int(shape.v_heads);
  const Layout layout(dk);
  const int ks = layout.ks, dkp = layout.dkp;
  Bf16* w_s = smem;
  Bf16* q_s = w_s + kChunk * ks;
  Bf16* k_s = q_s + kChunk * ks;
  Bf16* p_s = k_s + kChunk * ks;
  Bf16* u_s = p_s + kChunk * kWideStride;
  Bf16* ud_s = u_s + kChunk * kWideStride;  // diag(gamma_L / gamma) U
  Bf16* s_s = ud_s + kChunk * kWideStride;

  // Blocks run in order of blockIdx.y (documents, longest first), then x (heads, slices).
  const int slices = (dv + kColumns - 1) / kColumns;
  const DeltaSpan doc = documents[blockIdx.y];
  const int h = int(blockIdx.x) / slices;
  const int kh = h / (vh / int(shape.qk_heads));
  const int col0 = int(blockIdx.x) % slices * kColumns;
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
  const int g = lane / 4, t = lane % 4;
  const uint64_t w_stride = uint64_t(vh) * dk, qkv_stride = shape.conv_dim();
  const uint64_t p_stride = uint64_t(vh) * kChunk;

  const auto copy_w_q = [&](int c0, int len) {
    copy_chunk_rows<kThreads>(w_s, ks, dkp, scratch.w_bf16 + (uint64_t(c0) * vh + h) * dk, w_stride,
                              len, dk);
    copy_chunk_rows<kThreads>(q_s, ks, dkp, qkv + uint64_t(c0) * qkv_stride + size_t(kh) * dk,
                              qkv_stride, len, dk);
  };
  const auto copy_k_p = [&](int c0, int len) {
    copy_chunk_rows<kThreads>(k_s, ks, dkp,
                              qkv + uint64_t(c0) * qkv_stride + shape.qk_dim() + size_t(kh) * dk,
                              qkv_stride, len, dk);
    copy_chunk_rows<kThreads>(p_s, kWideStride, kChunk,
                              scratch.p_bf16 + (uint64_t(c0) * vh + h) * kChunk, p_stride, len,
                              kChunk);
  };

  // This warp's share: token rows `row` .. row + 15 of U and O, state rows s_row .. s_row +
  // 31, the block's columns `half` .. half + kWarpColumns - 1.
  const int row = 16 * (warp % 4), s_row = 32 * (warp % 4), half = kWarpColumns * (warp / 4);
  // The state's fp32 value: rows s_row + 16 m + (g, g + 8), the warp's columns.
  Tile state[2][kWarpTiles];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int n = 0; n < kWarpTiles; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) state[m][n][i] = 0.0f;
  // A document starts from a zero state.
  for (int e = int(threadIdx.x); e < dkp * kWideStride / 8; e += kThreads)
    reinterpret_cast<uint4*>(s_s)[e] = make_uint4(0, 0, 0, 0);
  // Two groups of copies a chunk: W and Q, read first, then K and P, not read until U is
  // whole, so their copies land behind step 1's products.
  copy_w_q(doc.begin, min(kChunk, doc.end - doc.begin));
  gpu::cp_async_commit();
  copy_k_p(doc.begin, min(kChunk, doc.end - doc.begin));
  gpu::cp_async_commit();

  for (int c0 = doc.begin; c0 < doc.end; c0 += kChunk) {
    const int len = min(kChunk, doc.end - c0);
    const int next_len = min(kChunk, doc.end - c0 - kChunk);  // <= 0: none
    // -U' into the accumulators of U (from global while the copies land); rows past the
    // chunk and columns past dv read as zero, so U is zero there.
    Tile u[kWarpTiles], o[kWarpTiles];
#pragma unroll
    for (int n = 0; n < kWarpTiles; ++n) {
      const int c = col0 + half + n * 8 + 2 * t;
#pragma unroll
      for (int bottom = 0; bottom < 2; ++bottom) {
        const int r = row + g + 8 * bottom;
        uint32_t pair = 0;
        if (r < len && c < dv)
          pair = *reinterpret_cast<const uint32_t*>(scratch.u_bf16 +
                                                    (uint64_t(c0 + r) * vh + h) * dv + c);
        const float2 v = gpu::unpack_bf16(pair);
        u[n][2 * bottom] = -v.x;
        u[n][2 * bottom + 1] = -v.y;
        o[n][2 * bottom] = o[n][2 * bottom + 1] = 0.0f;
      }
    }
    // G of the chunk's last row and of this lane's two rows (rows past the chunk: any).
    const float g_last = scratch.g_sum[uint64_t(c0 + len - 1) * vh + h];
    const float g_top = scratch.g_sum[uint64_t(c0 + min(row + g, len - 1)) * vh + h];
    const float g_bottom = scratch.g_sum[uint64_t(c0 + min(row + g + 8, len - 1)) * vh + h];
    gpu::cp_async_wait<1>();  // W and Q: every group but the last, K and P's
    __syncthreads();          // W, Q and S's operand copy are whole

    // 1. -U = W S - U' and Q S.
    for (int kk = 0; kk < dkp; kk += 16) {
      uint32_t a_w[4], a_q[4];
      gpu::load_a_fragment(a_w, w_s + row * ks + kk, ks, lane);
      gpu::load_a_fragment(a_q, q_s + row * ks + kk, ks, lane);
#pragma unroll
      for (int n = 0; n < kWarpTiles; n += 2) {
        uint32_t b[4];
        gpu::load_b_fragments(b, s_s + kk * kWideStride + half + n * 8, kWideStride, lane);
        gpu::mma_bf16_16816(u[n], a_w, b[0], b[1]);
        gpu::mma_bf16_16816(u[n + 1], a_w, b[2], b[3]);
        gpu::mma_bf16_16816(o[n], a_q, b[0], b[1]);
        gpu::mma_bf16_16816(o[n + 1], a_q, b[2], b[3]);
      }
    }
    store_operand(u, u_s + row * kWideStride + half, -1.0f, -1.0f, lane);
    store_operand(u, ud_s + row * kWideStride + half, -expf(g_last - g_top),
                  -expf(g_last - g_bottom), lane);
    gpu::cp_async_wait<0>();
    __syncthreads();  // U, K and P are whole; S's copy, W and Q are read for the last time
    if (next_len > 0) copy_w_q(c0 + kChunk, next_len);
    gpu::cp_async_commit();

    // 2. O = diag(gamma) (Q S) + P U over U's rows 0 .. row + 15 (P is causal), then out.
    const float gamma_top = expf(g_top), gamma_bottom = expf(g_bottom);
#pragma unroll
    for (int n = 0; n < kWarpTiles; ++n) {
      o[n][0] *= gamma_top;
      o[n][1] *= gamma_top;
      o[n][2] *= gamma_bottom;
      o[n][3] *= gamma_bottom;
    }
    for (int kk = 0; kk <= row; kk += 16) {
      uint32_t a[4];
      gpu::load_a_fragment(a, p_s + row * kWideStride + kk, kWideStride, lane);
      accumulate_row(o, a, u_s + kk * kWideStride + half, lane);
    }
#pragma unroll
    for (int n = 0; n < kWarpTiles; ++n) {
      const int c = col0 + half + n * 8 + 2 * t;
#pragma unroll
      for (int bottom = 0; bottom < 2; ++bottom) {
        const int r = row + g + 8 * bottom;
        if (r < len && c < dv)
          *reinterpret_cast<uint32_t*>(out + uint64_t(c0 + r) * shape.v_dim() + size_t(h) * dv +
                                       c) = gpu::bf16_pair(o[n][2 * bottom], o[n][2 * bottom + 1]);
      }
    }

    // 3. S = gamma_L S + K^T (diag(gamma_L / gamma) U) on this warp's state rows, then their
    // operand copy for the next chunk (nobody reads S's copy until the barrier below).
    // Both row tiles of the warp read each fragment of U once.
    const float decay = expf(g_last);
    const bool second = s_row + 16 < dkp;  // the warp's second row tile is in S
    if (s_row < dkp) {
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int n = 0; n < kWarpTiles; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) state[m][n][i] *= decay;
      for (int kk = 0; kk < kChunk; kk += 16) {
        uint32_t a[2][4];
        gpu::load_a_fragment_transposed(a[0], k_s + kk * ks + s_row, ks, lane);
        if (second) gpu::load_a_fragment_transposed(a[1], k_s + kk * ks + s_row + 16, ks, lane);
#pragma unroll
        for (int n = 0; n < kWarpTiles; n += 2) {
          uint32_t b[4];
          gpu::load_b_fragments(b, ud_s + kk * kWideStride + half + n * 8, kWideStride, lane);
          gpu::mma_bf16_16816(state[0][n], a[0], b[0], b[1]);
          gpu::mma_bf16_16816(state[0][n + 1], a[0], b[2], b[3]);
          if (second) {
            gpu::mma_bf16_16816(state[1][n], a[1], b[0], b[1]);
            gpu::mma_bf16_16816(state[1][n + 1], a[1], b[2], b[3]);
          }
        }
      }
      store_operand(state[0], s_s + s_row * kWideStride + half, 1.0f, 1.0f, lane);
      if (second)
        store_operand(state[1], s_s + (s_row + 16) * kWideStride + half, 1.0f, 1.0f, lane);
    }
    __syncthreads();  // K, P and U are read for the last time; S's copy is whole
    if (next_len > 0) copy_k_p(c0 + kChunk, next_len);
    gpu::cp_async_commit();
  }
}

}  // namespace

cudaError_t launch_delta_state_bf16(const Bf16* qkv, DeltaNetShape shape,
                                    const DeltaSpan* documents, uint32_t document_count,
                                    const DeltaScratch& scratch, Bf16* out, cudaStream_t stream) {
  if (document_count > 65535) return cudaErrorInvalidValue;
  const size_t bytes = Layout(int(shape.qk_head_dim)).values() * sizeof(Bf16);
  const auto kernel = delta_fixed_head_dims(shape) ? delta_state_bf16_kernel<kDeltaFixedHeadDim>
                                                   : delta_state_bf16_kernel<0>;
  if (cudaError_t err =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
      err != cudaSuccess)
    return err;
  const unsigned slices = (shape.v_head_dim + kColumns - 1) / kColumns;
  kernel<<<dim3(shape.v_heads * slices, document_count), kThreads, bytes, stream>>>(
      qkv, shape, documents, scratch, out);
  return cudaGetLastError();
}

}  // namespace hsring
