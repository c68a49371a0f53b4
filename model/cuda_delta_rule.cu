// The chunked gated delta rule's entry points and scratch, and its TF32 variants on the
// tensor cores (launch_delta_rule_tf32; the algebra is in model/cuda_delta_net.h; the bf16
// rule's passes are model/cuda_delta_prepare_bf16.cu and model/cuda_delta_state_bf16.cu).
//
// Every product is a WMMA m16n16k8 TF32 product with fp32 accumulation. One TF32 product
// (kTf32) keeps 11 significant bits; 3xTF32 splits each operand into its TF32 part and
// the TF32 rounding of the remainder (hi*hi + hi*lo + lo*hi) and keeps fp32's accuracy at a
// third of the rate. With one product, every operand tile is rounded to TF32 once, where it
// is written (shared memory or scratch), not in each warp that loads it: the per-fragment
// conversions were most of the products' instructions (ncu, bench/RESULTS.md).
//
// Pass 1, one block per (chunk, value head): K K^T and Q K^T on the tensor cores, masked and
// decayed into A and P, the unit-lower-triangular system inverted blockwise (16 x 16
// diagonal blocks by substitution, then the off-diagonal blocks level by level), and W and
// U' as products of that inverse.
// Pass 2, one block per (document, value head, 64 state columns), walks the document's
// chunks in order: U = U' - W S, O = diag(gamma) Q S + P U, S = gamma_L S +
// (K diag(gamma_L / gamma))^T U. The state's fp32 value stays in the accumulators of the
// warps that update it; shared memory holds its operand copy for the products.
// Shared tiles have row strides of 16 m + 4 floats: rows fall on different banks, and every
// 16 x 8 operand tile still starts 32-byte aligned, as WMMA requires.
#include <cuda_pipeline.h>
#include <mma.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "model/cuda_delta_chunk.cuh"
#include "model/cuda_delta_net.h"
#include "model/cuda_delta_rule_passes.h"

namespace hsring {

namespace {

using namespace nvcuda;

constexpr int kChunk = int(kDeltaChunk);
constexpr int kTile = 16;
static_assert(kTile == kDeltaBlock, "a WMMA tile is a diagonal block of the system");
constexpr int kSlice = 64;  // pass 2's state columns per block
constexpr int kPrepareThreads = 256;
constexpr int kStateThreads = 512;

__host__ __device__ constexpr int round16(int n) { return (n + kTile - 1) / kTile * kTile; }
__host__ __device__ constexpr int stride_for(int columns) { return round16(columns) + 4; }
constexpr int kChunkStride = stride_for(kChunk);

using Accumulator = wmma::fragment<wmma::accumulator, kTile, kTile, 8, float>;

// Offset of element (row, column) of a matrix stored in this layout.
template <class Layout>
__device__ __forceinline__ int at(int row, int column, int ld) {
  if constexpr (std::is_same_v<Layout, wmma::row_major>)
    return row * ld + column;
  else
    return column * ld + row;
}

template <class Fragment>
__device__ __forceinline__ void load_split(Fragment& hi, Fragment& lo, const float* p, int ld) {
  wmma::load_matrix_sync(hi, p, unsigned(ld));
#pragma unroll
  for (int i = 0; i < hi.num_elements; ++i) {
    const float x = hi.x[i];
    const float high = wmma::__float_to_tf32(x);
    hi.x[i] = high;
    lo.x[i] = wmma::__float_to_tf32(x - high);
  }
}

template <class Fragment>
__device__ __forceinline__ void load_tf32(Fragment& f, const float* p, int ld) {
  wmma::load_matrix_sync(f, p, unsigned(ld));
#pragma unroll
  for (int i = 0; i < f.num_elements; ++i) f.x[i] = wmma::__float_to_tf32(f.x[i]);
}

// What a product's operand tiles hold: fp32 values to split (3xTF32), fp32 values to round
// as they are loaded, or values already rounded to TF32 (operand<false>).
enum class Operands { kSplit, kRound, kRounded };

// The value an operand tile stores for x: its TF32 rounding with one product, x itself for
// the split.
template <bool kSplit>
__device__ __forceinline__ float operand(float x) {
  if constexpr (kSplit)
    return x;
  else
    return wmma::__float_to_tf32(x);
}

template <bool kSplit>
constexpr Operands kStored = kSplit ? Operands::kSplit : Operands::kRounded;

// acc += A[16 x depth] B[depth x 16]: a and b point at the tiles' first elements.
template <Operands kMode, class LayoutA, class LayoutB>
__device__ __forceinline__ void accumulate(Accumulator& acc, const float* a, int lda,
                                           const float* b, int ldb, int depth) {
  wmma::fragment<wmma::matrix_a, kTile, kTile, 8, wmma::precision::tf32, LayoutA> a_hi, a_lo;
  wmma::fragment<wmma::matrix_b, kTile, kTile, 8, wmma::precision::tf32, LayoutB> b_hi, b_lo;
  for (int k = 0; k < depth; k += 8) {
    const float* a_k = a + at<LayoutA>(0, k, lda);
    const float* b_k = b + at<LayoutB>(k, 0, ldb);
    if constexpr (kMode == Operands::kSplit) {
      load_split(a_hi, a_lo, a_k, lda);
      load_split(b_hi, b_lo, b_k, ldb);
      // Small terms first: their sum is rounded once into the large one.
      wmma::mma_sync(acc, a_lo, b_hi, acc);
      wmma::mma_sync(acc, a_hi, b_lo, acc);
    } else if constexpr (kMode == Operands::kRound) {
      load_tf32(a_hi, a_k, lda);
      load_tf32(b_hi, b_k, ldb);
    } else {
      wmma::load_matrix_sync(a_hi, a_k, unsigned(lda));
      wmma::load_matrix_sync(b_hi, b_k, unsigned(ldb));
    }
    wmma::mma_sync(acc, a_hi, b_hi, acc);
  }
}

template <bool kSplit>
__device__ __forceinline__ void round_operand(Accumulator& acc) {
#pragma unroll
  for (int i = 0; i < acc.num_elements; ++i) acc.x[i] = operand<kSplit>(acc.x[i]);
}

// Writes the tile's rows < rows and columns < columns to dst (row stride ld): straight from
// the fragment when the whole tile fits and is aligned for it, else through the warp's
// 16 x 16 staging tile.
__device__ __forceinline__ void store_tile(const Accumulator& acc, float* dst, uint64_t ld,
                                           int rows, int columns, float* staging) {
  if (rows <= 0 || columns <= 0) return;
  if (rows >= kTile && columns >= kTile && ld % 8 == 0 &&
      reinterpret_cast<uintptr_t>(dst) % 32 == 0) {
    wmma::store_matrix_sync(dst, acc, unsigned(ld), wmma::mem_row_major);
    return;
  }
  wmma::store_matrix_sync(staging, acc, kTile, wmma::mem_row_major);
  __syncwarp();
  const int lane = int(threadIdx.x % 32);
  for (int e = lane; e < kTile * kTile; e += 32) {
    const int r = e / kTile, c = e % kTile;
    if (r < rows && c < columns) dst[uint64_t(r) * ld + c] = staging[e];
  }
  __syncwarp();
}

// Starts copying rows r < rows, columns c < columns of src (row stride `stride`) into the
// shared tile [tile_rows][tile_columns] (row stride ld) without waiting (cp.async: every
// copy of the block is in flight at once, instead of one load latency per loop turn), and
// zeroes the rest of the tile. Columns, strides and src are multiples of 4 floats. The
// caller commits, waits and synchronises before reading.
__device__ __forceinline__ void copy_rows_async(float* dst, int ld, int tile_rows, int tile_columns,
                                                const float* src, uint64_t stride, int rows,
                                                int columns) {
  const int quads = tile_columns / 4;
  for (int e = int(threadIdx.x); e < tile_rows * quads; e += int(blockDim.x)) {
    const int r = e / quads, c = (e % quads) * 4;
    float* to = dst + r * ld + c;
    if (r < rows && c < columns)
      __pipeline_memcpy_async(to, src + uint64_t(r) * stride + c, sizeof(float4));
    else
      *reinterpret_cast<float4*>(to) = make_float4(0, 0, 0, 0);
  }
}

__device__ __forceinline__ void wait_for_copies() {
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
}

// Multiplies rows r < rows of the shared tile (columns [0, columns), a multiple of 4) by
// scale(r), leaving an operand tile (operand<kSplit>).
template <bool kSplit, class Scale>
__device__ __forceinline__ void scale_rows(float* tile, int ld, int rows, int columns,
                                           Scale scale) {
  const int quads = columns / 4;
  for (int e = int(threadIdx.x); e < rows * quads; e += int(blockDim.x)) {
    const int r = e / quads;
    const float s = scale(r);
    float4& v = *reinterpret_cast<float4*>(tile + r * ld + (e % quads) * 4);
    v = make_float4(operand<kSplit>(v.x * s), operand<kSplit>(v.y * s), operand<kSplit>(v.z * s),
                    operand<kSplit>(v.w * s));
  }
}

// Pass 1's shared memory (floats): K [kChunk][ks], Q and then V [kChunk][max(ks, vs)], A and
// T [kChunk][kChunkStride] each, a staging tile per warp, G and beta [kChunk].
struct PrepareLayout {
  int ks, vs;
  __host__ __device__ PrepareLayout(int dk, int dv) : ks(stride_for(dk)), vs(stride_for(dv)) {}
  __host__ __device__ int qv_stride() const { return ks > vs ? ks : vs; }
  __host__ __device__ size_t floats() const {
    return size_t(kChunk) * (ks + qv_stride() + 2 * kChunkStride) +
           size_t(kPrepareThreads / 32) * kTile * kTile + 2 * kChunk;
  }
};

template <bool kSplit>
__global__ void __launch_bounds__(kPrepareThreads, 2)
    delta_prepare_kernel(const float* __restrict__ qkv, const float* __restrict__ g,
                         const float* __restrict__ beta, DeltaNetShape shape,
                         const DeltaSpan* __restrict__ chunks, DeltaScratch scratch) {
  extern __shared__ __align__(128) float smem[];
  const int dk = int(shape.qk_head_dim), dv = int(shape.v_head_dim);
  const int dkp = round16(dk), dvp = round16(dv);
  const int vh = int(shape.v_heads);
  const PrepareLayout layout(dk, dv);
  const int ks = layout.ks, qs = layout.qv_stride(), as = kChunkStride;
  constexpr int kWarps = kPrepareThreads / 32;
  float* k_s = smem;
  float* qv_s = k_s + kChunk * ks;
  float* a_s = qv_s + kChunk * qs;
  float* t_s = a_s + kChunk * as;
  float* g_s = t_s + kChunk * as + kWarps * kTile * kTile;
  float* b_s = g_s + kChunk;
  const int tid = int(threadIdx.x), warp = tid / 32;
  float* staging = t_s + kChunk * as + warp * kTile * kTile;

  const DeltaSpan chunk = chunks[blockIdx.x];
  const int h = int(blockIdx.y);
  const int kh = h / (vh / int(shape.qk_heads));
  const int c0 = chunk.begin;
  const int len = chunk.end - chunk.begin;
  const uint64_t stride = shape.conv_dim();
  const float* q_src = qkv + uint64_t(c0) * stride + size_t(kh) * dk;
  const float* k_src = q_src + shape.qk_dim();
  const float* v_src = qkv + uint64_t(c0) * stride + 2 * size_t(shape.qk_dim()) + size_t(h) * dv;

  copy_rows_async(k_s, ks, kChunk, dkp, k_src, stride, len, dk);
  copy_rows_async(qv_s, qs, kChunk, dkp, q_src, stride, len, dk);
  if (warp == 0) load_chunk_gates(g, beta, c0, len, vh, h, tid, g_s, b_s);
  wait_for_copies();

  // The 10 lower 16 x 16 tiles of K K^T (into A) and of Q K^T (decayed and masked into P:
  // P[i][j] = exp(G_i - G_j) (q_i . k_j) for j <= i, the decay ratio of two tokens and never
  // a lone exp(-G)).
  constexpr int kLowerTiles = 10;
  float* p_out = scratch.p + size_t(h) * kChunk;
  const uint64_t p_stride = uint64_t(vh) * kChunk;
  for (int job = warp; job < 2 * kLowerTiles; job += kWarps) {
    int tj = job % kLowerTiles, ti = 0;
    while (tj > ti) tj -= ++ti;  // the job's tile (ti, tj), tj <= ti
    const bool scores = job >= kLowerTiles;
    const float* rows = scores ? qv_s + ti * kTile * qs : k_s + ti * kTile * ks;
    Accumulator acc;
    wmma::fill_fragment(acc, 0.0f);
    // K and Q as copied: fp32, rounded as they are loaded (K is scaled later, from fp32).
    accumulate<kSplit ? Operands::kSplit : Operands::kRound, wmma::row_major, wmma::col_major>(
        acc, rows, scores ? qs : ks, k_s + tj * kTile * ks, ks, dkp);
    if (!scores) {
      wmma::store_matrix_sync(a_s + ti * kTile * as + tj * kTile, acc, as, wmma::mem_row_major);
      continue;
    }
    wmma::store_matrix_sync(staging, acc, kTile, wmma::mem_row_major);
    __syncwarp();
    for (int e = tid % 32; e < kTile * kTile; e += 32) {
      const int i = ti * kTile + e / kTile, j = tj * kTile + e % kTile;
      if (i < len)
        p_out[uint64_t(c0 + i) * p_stride + j] =
            j <= i ? operand<kSplit>(expf(g_s[i] - g_s[j]) * staging[e]) : 0.0f;
    }
    __syncwarp();
  }
  // P's upper tiles are zero.
  for (int e = tid; e < kChunk * kChunk; e += kPrepareThreads) {
    const int i = e / kChunk, j = e % kChunk;
    if (i < len && j / kTile > i / kTile) p_out[uint64_t(c0 + i) * p_stride + j] = 0.0f;
  }
  __syncthreads();

  // Q is done with: V takes its place, in flight while T is found. A[i][j] = beta_i
  // exp(G_i - G_j) (k_i . k_j) for j < i, zero elsewhere; K scaled by beta gamma is W's
  // right-hand side.
  copy_rows_async(qv_s, qs, kChunk, dvp, v_src, stride, len, dv);
  __pipeline_commit();
  for (int e = tid; e < kChunk * kChunk; e += kPrepareThreads) {
    const int i = e / kChunk, j = e % kChunk;
    float& a = a_s[i * as + j];
    a = j < i ? b_s[i] * expf(g_s[i] - g_s[j]) * a : 0.0f;
  }
  scale_rows<kSplit>(k_s, ks, len, dkp, [&](int r) { return b_s[r] * expf(g_s[r]); });
  __syncthreads();

  // T = (I + A)^-1, lower triangular. Its four 16 x 16 diagonal blocks by forward
  // substitution, one thread per (block, column).
  if (tid < kChunk) {
    const int base = (tid / kTile) * kTile;
    float column[kTile];
    unit_lower_inverse_column(a_s + base * as + base, as, tid % kTile, column);
#pragma unroll
    for (int r = 0; r < kTile; ++r) t_s[(base + r) * as + base + tid % kTile] = column[r];
  }
  __syncthreads();
  // Then the blocks d below the diagonal, d = 1, 2, 3: T_ij = -T_ii (sum_{j<=m<i} A_im T_mj),
  // the sum kept in the unused upper block (j, i) between the two steps.
  for (int d = 1; d < kChunk / kTile; ++d) {
    const int blocks = kChunk / kTile - d;
    for (int e = tid; e < blocks * kTile * kTile; e += kPrepareThreads) {
      const int i = (d + e / (kTile * kTile)) * kTile, j = i - d * kTile;
      const int r = (e / kTile) % kTile, c = e % kTile;
      float x = 0;
      for (int m = j; m < i; ++m) x = fmaf(a_s[(i + r) * as + m], t_s[m * as + j + c], x);
      t_s[(j + r) * as + i + c] = x;
    }
    __syncthreads();
    for (int e = tid; e < blocks * kTile * kTile; e += kPrepareThreads) {
      const int i = (d + e / (kTile * kTile)) * kTile, j = i - d * kTile;
      const int r = (e / kTile) % kTile, c = e % kTile;
      float x = 0;
      for (int m = 0; m <= r; ++m)
        x = fmaf(t_s[(i + r) * as + i + m], t_s[(j + m) * as + i + c], x);
      t_s[(i + r) * as + j + c] = -x;
    }
    __syncthreads();
  }

  // T is whole: its operand copy, in place (the blocks the products read: j <= i).
  for (int e = tid; e < kChunk * kChunk; e += kPrepareThreads) {
    const int i = e / kChunk, j = e % kChunk;
    if (j / kTile <= i / kTile) t_s[i * as + j] = operand<kSplit>(t_s[i * as + j]);
  }
  __pipeline_wait_prior(0);
  __syncthreads();
  scale_rows<kSplit>(qv_s, qs, len, dvp, [&](int r) { return b_s[r]; });  // U''s right-hand side
  __syncthreads();

  // W = T diag(beta gamma) K and U' = T diag(beta) V, row tile i reading T's blocks 0..i.
  const int w_tiles = dkp / kTile, tiles = kChunk / kTile * (w_tiles + dvp / kTile);
  for (int job = warp; job < tiles; job += kWarps) {
    const int ti = job % (kChunk / kTile), tn = job / (kChunk / kTile);
    const bool is_w = tn < w_tiles;
    const int column = (is_w ? tn : tn - w_tiles) * kTile;
    if (ti * kTile >= len) continue;
    Accumulator acc;
    wmma::fill_fragment(acc, 0.0f);
    accumulate<kStored<kSplit>, wmma::row_major, wmma::row_major>(
        acc, t_s + ti * kTile * as, as, (is_w ? k_s + column : qv_s + column), is_w ? ks : qs,
        (ti + 1) * kTile);
    const uint64_t row = uint64_t(c0 + ti * kTile) * vh + h;
    if (is_w) round_operand<kSplit>(acc);  // W is pass 2's operand; U' seeds its accumulator
    if (is_w)
      store_tile(acc, scratch.w + row * dk + column, uint64_t(vh) * dk, len - ti * kTile,
                 dk - column, staging);
    else
      store_tile(acc, scratch.u + row * dv + column, uint64_t(vh) * dv, len - ti * kTile,
                 dv - column, staging);
  }
  if (tid < len) scratch.g_sum[uint64_t(c0 + tid) * vh + h] = g_s[tid];
}

// Pass 2's shared memory (floats): S [round16(dk)][kChunkStride], W, diag(gamma) Q and
// K diag(gamma_L / gamma) [kChunk][ks] each, P and U [kChunk][kChunkStride] each, a staging
// tile per warp, G [kChunk].
struct StateLayout {
  int ks, dkp;
  __host__ __device__ explicit StateLayout(int dk) : ks(stride_for(dk)), dkp(round16(dk)) {}
  __host__ __device__ size_t floats() const {
    return size_t(dkp) * kChunkStride + size_t(kChunk) * (3 * ks + 2 * kChunkStride) +
           size_t(kStateThreads / 32) * kTile * kTile + kChunk;
  }
};
static_assert(kSlice == kChunk, "S and U share the chunk's row stride");

template <bool kSplit>
__global__ void __launch_bounds__(kStateThreads, 1)
    delta_state_kernel(const float* __restrict__ qkv, DeltaNetShape shape,
                       const DeltaSpan* __restrict__ documents, DeltaScratch scratch,
                       float* __restrict__ out) {
  extern __shared__ __align__(128) float smem[];
  const int dk = int(shape.qk_head_dim), dv = int(shape.v_head_dim);
  const int vh = int(shape.v_heads);
  const StateLayout layout(dk);
  const int ks = layout.ks, dkp = layout.dkp, ss = kChunkStride;
  constexpr int kWarps = kStateThreads / 32;
  float* s_s = smem;
  float* w_s = s_s + dkp * ss;
  float* q_s = w_s + kChunk * ks;
  float* k_s = q_s + kChunk * ks;
  float* p_s = k_s + kChunk * ks;
  float* u_s = p_s + kChunk * ss;
  float* g_s = u_s + kChunk * ss + kWarps * kTile * kTile;
  const int tid = int(threadIdx.x), warp = tid / 32;
  float* staging = u_s + kChunk * ss + warp * kTile * kTile;

  const DeltaSpan doc = documents[blockIdx.x];
  const int h = int(blockIdx.y);
  const int kh = h / (vh / int(shape.qk_heads));
  const int col0 = int(blockIdx.z) * kSlice;
  const int cols = min(kSlice, dv - col0);
  const uint64_t stride = shape.conv_dim();
  const float* q_src = qkv + size_t(kh) * dk;
  const float* k_src = q_src + shape.qk_dim();
  // This warp's tile of U and O: rows ti, columns tn.
  const int ti = warp / (kSlice / kTile), tn = warp % (kSlice / kTile);
  // The state's fp32 value: this warp's tiles warp, warp + kWarps, ... of S's
  // [dkp / kTile][kSlice / kTile] tiles, kept across chunks.
  constexpr int kStateTilesPerWarp =
      round16(int(kDeltaMaxHeadDim)) / kTile * (kSlice / kTile) / kWarps;
  const int state_tiles = dkp / kTile * (kSlice / kTile);
  Accumulator state[kStateTilesPerWarp];
#pragma unroll
  for (int n = 0; n < kStateTilesPerWarp; ++n) wmma::fill_fragment(state[n], 0.0f);

  for (int e = tid; e < dkp * ss; e += kStateThreads) s_s[e] = 0.0f;  // a document starts empty

  for (int c0 = doc.begin; c0 < doc.end; c0 += kChunk) {
    const int len = min(kChunk, doc.end - c0);
    const uint64_t first = uint64_t(c0) * vh + h;
    __syncthreads();  // the previous chunk is done with every tile
    copy_rows_async(w_s, ks, kChunk, dkp, scratch.w + first * dk, uint64_t(vh) * dk, len, dk);
    copy_rows_async(q_s, ks, kChunk, dkp, q_src + uint64_t(c0) * stride, stride, len, dk);
    copy_rows_async(k_s, ks, kChunk, dkp, k_src + uint64_t(c0) * stride, stride, len, dk);
    copy_rows_async(p_s, ss, kChunk, kChunk, scratch.p + first * kChunk, uint64_t(vh) * kChunk, len,
                    kChunk);
    copy_rows_async(u_s, ss, kChunk, kSlice, scratch.u + first * dv + col0, uint64_t(vh) * dv, len,
                    cols);
    if (tid < kChunk) g_s[tid] = tid < len ? scratch.g_sum[first + uint64_t(tid) * vh] : 0.0f;
    wait_for_copies();
    const float g_last = g_s[len - 1];
    scale_rows<kSplit>(q_s, ks, len, dkp, [&](int r) { return expf(g_s[r]); });
    scale_rows<kSplit>(k_s, ks, len, dkp, [&](int r) { return expf(g_last - g_s[r]); });
    __syncthreads();

    // U = U' - W S and diag(gamma) Q S, both from the chunk's starting state.
    const bool live = ti * kTile < len;
    Accumulator acc_o;
    wmma::fill_fragment(acc_o, 0.0f);
    if (live) {
      Accumulator acc_u;
      float* u_tile = u_s + ti * kTile * ss + tn * kTile;
      wmma::load_matrix_sync(acc_u, u_tile, ss, wmma::mem_row_major);
#pragma unroll
      for (int i = 0; i < acc_u.num_elements; ++i) acc_u.x[i] = -acc_u.x[i];
      accumulate<kStored<kSplit>, wmma::row_major, wmma::row_major>(acc_u, w_s + ti * kTile * ks,
                                                                    ks, s_s + tn * kTile, ss, dkp);
#pragma unroll
      for (int i = 0; i < acc_u.num_elements; ++i) acc_u.x[i] = operand<kSplit>(-acc_u.x[i]);
      wmma::store_matrix_sync(u_tile, acc_u, ss, wmma::mem_row_major);
      accumulate<kStored<kSplit>, wmma::row_major, wmma::row_major>(acc_o, q_s + ti * kTile * ks,
                                                                    ks, s_s + tn * kTile, ss, dkp);
    }
    __syncthreads();  // U is whole, and every read of the starting state is done

    // O = diag(gamma) Q S + P U.
    if (live) {
      accumulate<kStored<kSplit>, wmma::row_major, wmma::row_major>(
          acc_o, p_s + ti * kTile * ss, ss, u_s + tn * kTile, ss, (ti + 1) * kTile);
      store_tile(
          acc_o,
          out + uint64_t(c0 + ti * kTile) * shape.v_dim() + size_t(h) * dv + col0 + tn * kTile,
          shape.v_dim(), len - ti * kTile, cols - tn * kTile, staging);
    }
    // S = gamma_L S + (K diag(gamma_L / gamma))^T U on this warp's tiles of S, then their
    // operand copies for the next chunk.
    const float decay = expf(g_last);
    const int depth = (len + 7) / 8 * 8;
#pragma unroll
    for (int n = 0; n < kStateTilesPerWarp; ++n) {
      const int tile = warp + n * kWarps;
      if (tile >= state_tiles) break;
      const int tm = tile / (kSlice / kTile), tc = tile % (kSlice / kTile);
#pragma unroll
      for (int i = 0; i < state[n].num_elements; ++i) state[n].x[i] *= decay;
      accumulate<kStored<kSplit>, wmma::col_major, wmma::row_major>(state[n], k_s + tm * kTile, ks,
                                                                    u_s + tc * kTile, ss, depth);
      Accumulator copy = state[n];
      round_operand<kSplit>(copy);
      wmma::store_matrix_sync(s_s + tm * kTile * ss + tc * kTile, copy, ss, wmma::mem_row_major);
    }
  }
}

template <bool kSplit>
cudaError_t launch_passes(const float* qkv, const float* g, const float* beta, DeltaNetShape shape,
                          const DeltaSpan* chunks, uint32_t chunk_count, const DeltaSpan* documents,
                          uint32_t document_count, const DeltaScratch& scratch, float* out,
                          cudaStream_t stream) {
  const size_t prepare_bytes =
      PrepareLayout(int(shape.qk_head_dim), int(shape.v_head_dim)).floats() * sizeof(float);
  if (cudaError_t err =
          cudaFuncSetAttribute(delta_prepare_kernel<kSplit>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, int(prepare_bytes));
      err != cudaSuccess)
    return err;
  delta_prepare_kernel<kSplit>
      <<<dim3(chunk_count, shape.v_heads), kPrepareThreads, prepare_bytes, stream>>>(
          qkv, g, beta, shape, chunks, scratch);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  const size_t state_bytes = StateLayout(int(shape.qk_head_dim)).floats() * sizeof(float);
  if (cudaError_t err =
          cudaFuncSetAttribute(delta_state_kernel<kSplit>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, int(state_bytes));
      err != cudaSuccess)
    return err;
  const unsigned slices = (shape.v_head_dim + kSlice - 1) / kSlice;
  delta_state_kernel<kSplit>
      <<<dim3(document_count, shape.v_heads, slices), kStateThreads, state_bytes, stream>>>(
          qkv, shape, documents, scratch, out);
  return cudaGetLastError();
}

// Whether the shape is one the kernels take and their grids can hold.
bool rule_takes(DeltaNetShape shape) {
  return delta_net_supports(shape.qk_head_dim, shape.v_head_dim) && shape.qk_heads != 0 &&
         shape.v_heads % shape.qk_heads == 0 && shape.v_heads <= 65535;
}

}  // namespace

uint64_t delta_scratch_floats(uint32_t rows, DeltaNetShape s) {
  const uint64_t tf32 = uint64_t(s.v_heads) * (s.qk_head_dim + kDeltaChunk + s.v_head_dim);
  const uint64_t bf16 =
      (uint64_t(s.v_heads) * (s.qk_head_dim + kDeltaChunk + s.v_head_dim) + 1) / 2;
  return uint64_t(rows) * (std::max(tf32, bf16) + s.v_heads);
}

DeltaScratch delta_scratch_parts(float* base, uint32_t rows, DeltaNetShape s, bool bf16) {
  const uint64_t rows_heads = uint64_t(rows) * s.v_heads;
  DeltaScratch parts;
  if (bf16) {
    parts.w_bf16 = reinterpret_cast<Bf16*>(base);
    parts.p_bf16 = parts.w_bf16 + rows_heads * s.qk_head_dim;
    parts.u_bf16 = parts.p_bf16 + rows_heads * kDeltaChunk;
    const Bf16* end = parts.u_bf16 + rows_heads * s.v_head_dim;
    parts.g_sum = base + (end - parts.w_bf16 + 1) / 2;
  } else {
    parts.w = base;
    parts.p = parts.w + rows_heads * s.qk_head_dim;
    parts.u = parts.p + rows_heads * kDeltaChunk;
    parts.g_sum = parts.u + rows_heads * s.v_head_dim;
  }
  return parts;
}

cudaError_t launch_delta_rule(const Bf16* qkv, const float* g, const float* beta,
                              DeltaNetShape shape, uint32_t rows, const DeltaSpan* chunks,
                              uint32_t chunk_count, const DeltaSpan* documents,
                              uint32_t document_count, float* scratch, Bf16* out,
                              cudaStream_t stream) {
  if (!rule_takes(shape) || reinterpret_cast<uintptr_t>(qkv) % 16 != 0)
    return cudaErrorInvalidValue;
  if (chunk_count == 0) return cudaSuccess;
  const DeltaScratch parts = delta_scratch_parts(scratch, rows, shape, true);
  if (cudaError_t err =
          launch_delta_prepare_bf16(qkv, g, beta, shape, chunks, chunk_count, parts, stream);
      err != cudaSuccess)
    return err;
  return launch_delta_state_bf16(qkv, shape, documents, document_count, parts, out, stream);
}

cudaError_t launch_delta_rule_tf32(const float* qkv, const float* g, const float* beta,
                                   DeltaNetShape shape, uint32_t rows, const DeltaSpan* chunks,
                                   uint32_t chunk_count, const DeltaSpan* documents,
                                   uint32_t document_count, float* scratch, float* out,
                                   cudaStream_t stream, DeltaTf32Precision precision) {
  if (!rule_takes(shape)) return cudaErrorInvalidValue;
  if (chunk_count == 0) return cudaSuccess;
  const DeltaScratch parts = delta_scratch_parts(scratch, rows, shape, false);
  if (precision == DeltaTf32Precision::kTf32x3)
    return launch_passes<true>(qkv, g, beta, shape, chunks, chunk_count, documents, document_count,
                               parts, out, stream);
  return launch_passes<false>(qkv, g, beta, shape, chunks, chunk_count, documents, document_count,
                              parts, out, stream);
}

}  // namespace hsring
