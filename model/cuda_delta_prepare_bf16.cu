// Pass 1 of the chunked gated delta rule for the bf16 pass 2 (DeltaPrecision::kBf16; the
// algebra is in model/cuda_delta_net.h, pass 2 in model/cuda_delta_state_bf16.cu).
//
// One block of eight warps per (chunk, q/k head), taking the head's value heads in turn (they
// share q and k, so the gram products are made once). Every product is an mma.sync m16n8k8
// TF32 product with fp32 accumulation, its fragments read from fp32 shared memory (q, k and
// v with row strides of 4 modulo 32 words: a fragment's 32 lanes fall on 32 banks) and
// rounded as they are read, or, for step 3's operands made in this kernel, rounded once as
// they are written. The element-wise work rides on the products' accumulators, whose layout
// is known, instead of passes over shared memory:
//   1. K K^T and Q K^T, the lower 16-row strips only, once per q/k head, their accumulators
//      kept in shared memory as each lane holds them; for each value head, the first masked
//      and decayed into
//      A_ij = beta_i exp(G_i - G_j) (k_i . k_j), j < i, in shared memory; the second into
//      P_ij = exp(G_i - G_j) (q_i . k_j), j <= i, straight to pass 2's bf16 operand.
//   2. The inverses of (I + A)'s four 16 x 16 diagonal blocks by forward substitution,
//      one thread per (block, column), the column in registers.
//   3. W and U' without forming (I + A)^-1: X = (I + A)^-1 [diag(beta gamma) K |
//      diag(beta) V] by blocked forward substitution, X_i = T_ii (B_i - sum_{j<i} A_ij X_j),
//      each warp on its own 32 columns (columns are independent), X_i overwriting B_i in
//      shared memory once read; 80 products a warp in all.
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
constexpr int kTile = kDeltaBlock;
constexpr int kBlocks = kChunk / kTile;  // diagonal blocks of the chunk's system
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kWarpColumns = 32;  // columns of X a warp solves for
// A's and the inverses' row strides are 8 modulo 32 words: step 3's fragments of them are
// read as pairs (load_a_pairs), and 16 lanes' pairs then fall on 32 banks.
constexpr int kAStride = kChunk + 8;
constexpr int kTStride = kTile + 8;
constexpr int kStripTiles = 20;  // 16 x 8 tiles of a 64-row chunk's lower 16-row strips
constexpr int kJobsPerWarp = 2 * kStripTiles / kWarps;
static_assert(2 * kStripTiles % kWarps == 0, "the strips' tiles spread evenly over the warps");
constexpr int kGramFloats = kWarps * kJobsPerWarp * 32 * 4;

__host__ __device__ constexpr int round8(int n) { return (n + 7) / 8 * 8; }
__host__ __device__ constexpr int round32(int n) { return (n + 31) / 32 * 32; }

// Shared memory (floats): K and then X's K part [kChunk][ks]; Q, then V and X's V part
// [kChunk][ks]; A [kChunk][kAStride]; the diagonal blocks' inverses [kBlocks][kTile][kTStride];
// the gram strips' accumulators, each lane's four in a row [kWarps][kJobsPerWarp][32][4]
// (registers would spill); G and beta [kChunk].
struct Layout {
  int ks;
  __host__ __device__ Layout(int dk, int dv) : ks(round32(dk > dv ? dk : dv) + 4) {}
  __host__ __device__ size_t floats() const {
    return size_t(2) * kChunk * ks + size_t(kChunk) * kAStride +
           size_t(kBlocks) * kTile * kTStride + size_t(kGramFloats) + 2 * kChunk;
  }
};

// The A fragment of the 16 x 8 tile at `tile` (row-major fp32, row stride ld).
__device__ __forceinline__ void load_a(uint32_t* a, const float* tile, int ld, int g, int t) {
  a[0] = gpu::to_tf32(tile[g * ld + t]);
  a[1] = gpu::to_tf32(tile[(g + 8) * ld + t]);
  a[2] = gpu::to_tf32(tile[g * ld + t + 4]);
  a[3] = gpu::to_tf32(tile[(g + 8) * ld + t + 4]);
}

// The same from a tile already rounded to TF32, with the product's k order permuted so that
// each register pair is one 8-byte load: the fragment's columns t and t + 4 are the tile's
// 2 t and 2 t + 1. The B fragment must follow (rows 2 t and 2 t + 1 for its b0 and b1).
__device__ __forceinline__ void load_a_pairs(uint32_t* a, const float* tile, int ld, int g, int t) {
  const float2 top = *reinterpret_cast<const float2*>(tile + g * ld + 2 * t);
  const float2 bottom = *reinterpret_cast<const float2*>(tile + (g + 8) * ld + 2 * t);
  a[0] = __float_as_uint(top.x);
  a[1] = __float_as_uint(bottom.x);
  a[2] = __float_as_uint(top.y);
  a[3] = __float_as_uint(bottom.y);
}

__device__ __forceinline__ float round_tf32(float x) { return __uint_as_float(gpu::to_tf32(x)); }

// Tile `job` of step 1's strips: the first kStripTiles are K K^T's, the rest Q K^T's; tile
// (i, n) is row block i, columns 8 n .. 8 n + 7, n < 2 (i + 1).
struct StripTile {
  bool scores;
  int i, n;
};
__device__ __forceinline__ StripTile strip_tile(int job) {
  StripTile tile{job >= kStripTiles, 0, job % kStripTiles};
  while (tile.n >= 2 * (tile.i + 1)) tile.n -= 2 * ++tile.i;
  return tile;
}

template <int kFixedDims>
__global__ void __launch_bounds__(kThreads, 2)
    delta_prepare_bf16_kernel(const float* __restrict__ qkv, const float* __restrict__ g,
                              const float* __restrict__ beta, DeltaShape shape,
                              const DeltaSpan* __restrict__ chunks, DeltaScratch scratch) {
  extern __shared__ __align__(16) float smem[];
  const int dk = head_dim_or<kFixedDims>(shape.qk_head_dim);
  const int dv = head_dim_or<kFixedDims>(shape.v_head_dim), vh = int(shape.v_heads);
  const int ks = Layout(dk, dv).ks;
  float* k_s = smem;
  float* qv_s = k_s + kChunk * ks;
  float* a_s = qv_s + kChunk * ks;
  float* t_s = a_s + kChunk * kAStride;
  float* gram_s = t_s + kBlocks * kTile * kTStride;
  float* g_s = gram_s + kGramFloats;
  float* b_s = g_s + kChunk;
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int gi = lane / 4, ti = lane % 4;  // the fragment row and column of this lane

  const DeltaSpan chunk = chunks[blockIdx.x];
  const int kh = int(blockIdx.y);
  const int group = vh / int(shape.qk_heads);
  const int c0 = chunk.begin;
  const int len = chunk.end - chunk.begin;
  const uint64_t stride = shape.conv_dim();
  const float* q_src = qkv + uint64_t(c0) * stride + size_t(kh) * dk;
  const float* k_src = q_src + shape.qk_dim();

  copy_chunk_rows<kThreads>(k_s, ks, dk, k_src, stride, len, dk);
  copy_chunk_rows<kThreads>(qv_s, ks, dk, q_src, stride, len, dk);
  gpu::cp_async_commit();
  gpu::cp_async_wait<0>();
  __syncthreads();

  // 1. The lower strips of K K^T and Q K^T, once for the q/k head's value heads: each
  // lane's accumulators are kept as they lie, to be masked and decayed by each value head's
  // gates. The float4 a lane writes and reads back is its own.
  float4* gram_lane = reinterpret_cast<float4*>(gram_s) + warp * kJobsPerWarp * 32 + lane;
  for (int j = 0; j < kJobsPerWarp; ++j) {
    const StripTile tile = strip_tile(warp + kWarps * j);
    if (tile.i * kTile >= len) continue;
    const float* rows = (tile.scores ? qv_s : k_s) + tile.i * kTile * ks;
    const float* keys = k_s + tile.n * 8 * ks;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int kk = 0; kk < dk; kk += 8) {
      uint32_t a[4];
      load_a(a, rows + kk, ks, gi, ti);
      gpu::mma_tf32_1688(acc, a, gpu::to_tf32(keys[gi * ks + kk + ti]),
                         gpu::to_tf32(keys[gi * ks + kk + ti + 4]));
    }
    gram_lane[j * 32] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  }
  // Pass 2's Q and K operands, once per q/k head, 8 values of a row per thread.
  const int octets = dk / 8;
  for (int e = tid; e < len * octets; e += kThreads) {
    const int r = e / octets, c = (e % octets) * 8;
    const uint64_t at = uint64_t(c0 + r) * shape.qk_dim() + size_t(kh) * dk + c;
    float q[8], k[8];
#pragma unroll
    for (int x = 0; x < 8; ++x) {
      q[x] = qv_s[r * ks + c + x];
      k[x] = k_s[r * ks + c + x];
    }
    gpu::store8(scratch.q_bf16 + at, 0, q);
    gpu::store8(scratch.k_bf16 + at, 0, k);
  }

  const int vp = round8(dv);
  const int width = dk + vp;
  const uint64_t p_stride = uint64_t(vh) * kChunk;
  for (int h = kh * group; h < (kh + 1) * group; ++h) {
    __syncthreads();  // the last reads of Q (or of the previous value head's K, V, A, gates)
    // This value head's V takes Q's place (its columns past dv zero); K is copied again
    // after the first value head, whose X took its place.
    const float* v_src = qkv + uint64_t(c0) * stride + 2 * size_t(shape.qk_dim()) + size_t(h) * dv;
    if (h != kh * group) copy_chunk_rows<kThreads>(k_s, ks, dk, k_src, stride, len, dk);
    copy_chunk_rows<kThreads>(qv_s, ks, vp, v_src, stride, len, dv);
    gpu::cp_async_commit();
    if (warp == 0) load_chunk_gates(g, beta, c0, len, vh, h, lane, g_s, b_s);
    __syncthreads();  // the gates are whole

    // The strips masked and decayed: A_ij = beta_i exp(G_i - G_j) (k_i . k_j), j < i, into
    // shared memory; P_ij = exp(G_i - G_j) (q_i . k_j), j <= i, straight to pass 2's bf16
    // operand.
    Bf16* p_out = scratch.p_bf16 + (uint64_t(c0) * vh + h) * kChunk;
    for (int j = 0; j < kJobsPerWarp; ++j) {
      const StripTile tile = strip_tile(warp + kWarps * j);
      if (tile.i * kTile >= len) continue;
      const float4 gram = gram_lane[j * 32];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = tile.i * kTile + gi + 8 * half, c = tile.n * 8 + 2 * ti;
        const float x0 = half == 0 ? gram.x : gram.z, x1 = half == 0 ? gram.y : gram.w;
        if (!tile.scores) {
          // Blocks left of the diagonal are only step 3's operands: rounded to TF32 here, once.
          const float a0 = c < r ? b_s[r] * __expf(g_s[r] - g_s[c]) * x0 : 0.0f;
          const float a1 = c + 1 < r ? b_s[r] * __expf(g_s[r] - g_s[c + 1]) * x1 : 0.0f;
          const bool operand = tile.n / 2 < tile.i;
          *reinterpret_cast<float2*>(a_s + r * kAStride + c) =
              operand ? make_float2(round_tf32(a0), round_tf32(a1)) : make_float2(a0, a1);
        } else if (r < len) {
          const float p0 = c <= r ? __expf(g_s[r] - g_s[c]) * x0 : 0.0f;
          const float p1 = c + 1 <= r ? __expf(g_s[r] - g_s[c + 1]) * x1 : 0.0f;
          *reinterpret_cast<uint32_t*>(p_out + uint64_t(r) * p_stride + c) = gpu::pack_bf16(p0, p1);
        }
      }
    }
    // P right of its diagonal blocks is zero: 8 values at a time.
    for (int e = tid; e < len * (kChunk / 8); e += kThreads) {
      const int r = e / (kChunk / 8), c = (e % (kChunk / 8)) * 8;
      if (c >= (r / kTile + 1) * kTile)
        *reinterpret_cast<uint4*>(p_out + uint64_t(r) * p_stride + c) = make_uint4(0, 0, 0, 0);
    }
    __syncthreads();  // A is whole

    // 2. T_bb = (I + A_bb)^-1 for the four diagonal blocks, one thread per (block, column):
    // the column's chain of dependent steps is register FMAs.
    if (tid < kChunk) {
      const int base = (tid / kTile) * kTile;
      invert_unit_lower_column<true>(a_s + base * kAStride + base, kAStride, t_s + base * kTStride,
                                     kTStride, tid % kTile);
    }
    gpu::cp_async_wait<0>();
    __syncthreads();  // K, V and the inverses are whole

    // 3. X = (I + A)^-1 B, B = [diag(beta gamma) K | diag(beta) V], this warp's columns
    // [n0, n0 + 32) of B's dk + vp: W = X's first dk columns, U' the rest.
    for (int n0 = warp * kWarpColumns; n0 < width; n0 += kWarps * kWarpColumns) {
      // Each 8-column tile q lies wholly in K's part or V's (dk is a multiple of 8).
      float* column[4];
      bool in_k[4], live[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int c = n0 + 8 * q;
        live[q] = c < width;
        in_k[q] = c < dk;
        column[q] = in_k[q] ? k_s + c : qv_s + (c - dk);
      }
      for (int i = 0; i < kBlocks && i * kTile < len; ++i) {
        // acc = sum_{j < i} A_ij X_j, X_j where B_j was.
        float acc[4][4] = {};
        for (int kk = 0; kk < i * kTile; kk += 8) {
          uint32_t a[4];
          load_a_pairs(a, a_s + i * kTile * kAStride + kk, kAStride, gi, ti);
#pragma unroll
          for (int q = 0; q < 4; ++q)
            if (live[q])
              gpu::mma_tf32_1688(acc[q], a, __float_as_uint(column[q][(kk + 2 * ti) * ks + gi]),
                                 __float_as_uint(column[q][(kk + 2 * ti + 1) * ks + gi]));
        }
        // R_i = B_i - acc, rounded to TF32 (the next product's operand), in B_i's place: each
        // lane reads and writes its own elements.
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = i * kTile + gi + 8 * half;
          const float k_scale = b_s[r] * __expf(g_s[r]), v_scale = b_s[r];
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            if (!live[q]) continue;
            float* at = column[q] + r * ks + 2 * ti;
            const float scale = in_k[q] ? k_scale : v_scale;
            at[0] = __uint_as_float(gpu::to_tf32(at[0] * scale - acc[q][2 * half]));
            at[1] = __uint_as_float(gpu::to_tf32(at[1] * scale - acc[q][2 * half + 1]));
          }
        }
        __syncwarp();  // R_i is whole for the warp's fragment loads
        // X_i = T_ii R_i.
        float x[4][4] = {};
#pragma unroll
        for (int kk = 0; kk < kTile; kk += 8) {
          uint32_t a[4];
          load_a_pairs(a, t_s + i * kTile * kTStride + kk, kTStride, gi, ti);
#pragma unroll
          for (int q = 0; q < 4; ++q)
            if (live[q])
              gpu::mma_tf32_1688(
                  x[q], a, __float_as_uint(column[q][(i * kTile + kk + 2 * ti) * ks + gi]),
                  __float_as_uint(column[q][(i * kTile + kk + 2 * ti + 1) * ks + gi]));
        }
        __syncwarp();  // every lane has read R_i before X_i takes its place
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = i * kTile + gi + 8 * half;
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            if (!live[q]) continue;
            const float x0 = x[q][2 * half], x1 = x[q][2 * half + 1];
            float* at = column[q] + r * ks + 2 * ti;
            at[0] = __uint_as_float(gpu::to_tf32(x0));
            at[1] = __uint_as_float(gpu::to_tf32(x1));
            if (r >= len) continue;
            const int c = n0 + 8 * q + 2 * ti;
            const uint64_t row = uint64_t(c0 + r) * vh + h;
            if (in_k[q])
              *reinterpret_cast<uint32_t*>(scratch.w_bf16 + row * dk + c) = gpu::pack_bf16(x0, x1);
            else if (c - dk < dv)
              *reinterpret_cast<uint32_t*>(scratch.u_bf16 + row * dv + (c - dk)) =
                  gpu::pack_bf16(x0, x1);
          }
        }
        __syncwarp();  // X_i is in place before the next block row's fragment loads
      }
    }
    if (tid < len) scratch.g_sum[uint64_t(c0 + tid) * vh + h] = g_s[tid];
  }
}

}  // namespace

cudaError_t launch_delta_prepare_bf16(const float* qkv, const float* g, const float* beta,
                                      DeltaShape shape, const DeltaSpan* chunks,
                                      uint32_t chunk_count, const DeltaScratch& scratch,
                                      cudaStream_t stream) {
  const size_t bytes =
      Layout(int(shape.qk_head_dim), int(shape.v_head_dim)).floats() * sizeof(float);
  const auto kernel = delta_fixed_head_dims(shape) ? delta_prepare_bf16_kernel<kDeltaFixedHeadDim>
                                                   : delta_prepare_bf16_kernel<0>;
  if (cudaError_t err =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
      err != cudaSuccess)
    return err;
  kernel<<<dim3(chunk_count, shape.qk_heads), kThreads, bytes, stream>>>(qkv, g, beta, shape,
                                                                         chunks, scratch);
  return cudaGetLastError();
}

}  // namespace hsring
