// The DFlash block attention on the bf16 tensor cores (train/cuda_block_attention_bf16.h).
// Each warp owns 16 rows of a CTA's 64 (query vectors, or keys on the key side) and runs
// mma.sync m16n8k16 (bf16 in, fp32 accumulate) with its fragments loaded by ldmatrix from
// shared-memory tiles whose rows are padded by 16 bytes (eight rows of an 8x8 matrix then
// fall in distinct banks). Scores stay in the accumulator registers: softmax, masks and
// dS are applied there in fp32, and the accumulator of two 8-key tiles is exactly the A
// fragment of the next product once rounded to bf16 (as flash attention 2 does), so no
// score matrix goes through shared memory. Tiles stream in with cp.async, one tile ahead.
// On Hopper at head_dim 128 the launchers take train/cuda_block_attention_wgmma.cu's
// warpgroup kernels instead (block_attention_wgmma_active).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "gpu/mma.cuh"
#include "train/block_attention_bf16_device.cuh"
#include "train/block_attention_wgmma.cuh"
#include "train/cuda_block_attention_bf16.h"

namespace hsring::train {

namespace {

using namespace attention_bf16;  // NOLINT(google-build-using-namespace): the shared pieces

constexpr int kWarpRows = 16;        // of kRows per warp
constexpr int kPadElems = 8;         // bf16 after each tile row (16 bytes)
constexpr int kMinChunkBlocks = 16;  // the key side's smallest chunk of a tile's blocks
constexpr int kTargetChunks = 1024;  // chunks grow past 16 blocks beyond this many

// ---- Fragment addresses (the PTX wrappers are gpu/mma.cuh's) ---------------------------

// Fragment addresses in a tile of row stride S. A operand (16 rows from r0, 16 columns
// from c0): matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
template <int S>
__device__ const bf16* a_address(const bf16* tile, int r0, int c0, int lane) {
  return tile + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * S + c0 + (lane >> 4) * 8;
}
// B operand of x . y^T with y's rows n0.. (two 8-column n tiles) and the contraction over
// columns c0..c0+15: matrices (rows 0-7, cols 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15);
// r[0], r[1] feed n tile n0, r[2], r[3] n tile n0 + 8.
template <int S>
__device__ const bf16* bt_address(const bf16* tile, int n0, int c0, int lane) {
  return tile + (n0 + (lane & 7) + (lane >> 4) * 8) * S + c0 + ((lane >> 3) & 1) * 8;
}
// B operand of p . y (ldmatrix .trans) with the contraction over y's rows k0..k0+15 and
// output columns c0..c0+15: r[0], r[1] feed columns c0.., r[2], r[3] columns c0 + 8...
template <int S>
__device__ const bf16* b_address(const bf16* tile, int k0, int c0, int lane) {
  return tile + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * S + c0 + (lane >> 4) * 8;
}

// ---- Shared pieces ----------------------------------------------------------------------

// rows x HD bf16 into a padded tile; row_source(i) is row i's first element or nullptr
// (zeros).
template <int HD, int Threads, class RowSource>
__device__ void load_tile(bf16* tile, int rows, RowSource row_source, const bf16* any) {
  constexpr int S = HD + kPadElems, kChunks = HD / 8;
  for (int c = int(threadIdx.x); c < rows * kChunks; c += Threads) {
    const int row = c / kChunks, col = (c % kChunks) * 8;
    const bf16* src = row_source(row);
    cp_async16(tile + row * S + col, src ? src + col : any, src != nullptr);
  }
}

// Keys [k0, k0 + KT) of block b's key list (its context rows, then its own rows; zeros
// past n_keys) into a k tile and a v tile. Each thread's rows are fixed (load_tile's), and
// each row's offset is computed once for both tiles, in 32 bits (valid_dims): the forward
// and dq kernels load a tile per 64 products a warp, and generic 64-bit indexing of every
// row cost them twice the products' instructions.
template <int HD, int KT, int Threads>
__device__ void load_keys(const Args& a, uint32_t b, uint32_t g, int32_t cb, int32_t n_ctx,
                          int32_t n_keys, int32_t k0, bf16* ks, bf16* vs) {
  constexpr int S = HD + kPadElems, kChunks = HD / 8, kStep = Threads / kChunks;
  static_assert(Threads % kChunks == 0 && KT % kStep == 0, "a thread's rows are fixed");
  const int col = (int(threadIdx.x) % kChunks) * 8;
  const uint32_t block_row0 = b * a.d.block_size, kv = a.d.kv_heads;
#pragma unroll
  for (int row = int(threadIdx.x) / kChunks; row < KT; row += kStep) {
    const int32_t key = k0 + row;
    const bool valid = key < n_keys, context = key < n_ctx;
    const uint32_t key_row = context ? uint32_t(cb + key) : block_row0 + uint32_t(key - n_ctx);
    const uint64_t at = valid ? uint64_t(key_row * kv + g) * HD + col : 0;
    cp_async16(ks + row * S + col, (context ? a.t.ctx_k : a.t.block_k) + at, valid);
    cp_async16(vs + row * S + col, (context ? a.t.ctx_v : a.t.block_v) + at, valid);
  }
}

// Query vectors [v0, v0 + QT) of block b (zeros past nv) into a q tile and, unless null, a
// dout tile, each row's index computed once for both.
template <int HD, int QT, int Threads>
__device__ void load_query_tiles(bf16* q_tile, bf16* dout_tile, const Tensors& t,
                                 const QueryIndexer& index_of, uint32_t b, uint32_t v0,
                                 uint32_t nv) {
  constexpr int S = HD + kPadElems, kChunks = HD / 8, kStep = Threads / kChunks;
  static_assert(Threads % kChunks == 0 && QT % kStep == 0, "a thread's rows are fixed");
  const int col = (int(threadIdx.x) % kChunks) * 8;
#pragma unroll
  for (int row = int(threadIdx.x) / kChunks; row < QT; row += kStep) {
    const uint32_t v = v0 + uint32_t(row);
    const bool valid = v < nv;
    const uint64_t at = valid ? uint64_t(index_of(b, v)) * HD + col : 0;
    cp_async16(q_tile + row * S + col, t.q + at, valid);
    if (dout_tile) cp_async16(dout_tile + row * S + col, t.dout + at, valid);
  }
}

// ---- Forward ----------------------------------------------------------------------------

template <int HD, int KT>
__global__ void __launch_bounds__(128) forward_kernel(Args a) {
  constexpr int S = HD + kPadElems;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* qs = reinterpret_cast<bf16*>(smem_raw);
  bf16* ks = qs + kRows * S;   // [2][KT][S]
  bf16* vs = ks + 2 * KT * S;  // [2][KT][S]
  const BlockAttentionDims& d = a.d;
  const QueryTile tile = query_tile(d, a.context, kRows, a.order);
  const uint32_t b = tile.b, g = tile.g, nv = tile.nv, v0 = tile.v0;
  const int32_t cb = tile.cb, n_ctx = tile.n_ctx, n_keys = tile.n_keys;
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
  const int gid = lane / 4, tig = lane % 4, r0 = warp * kWarpRows;
  load_query_tiles<HD, kRows, 128>(qs, nullptr, a.t, QueryIndexer(d, g), b, v0, nv);
  load_keys<HD, KT, 128>(a, b, g, cb, n_ctx, n_keys, 0, ks, vs);
  cp_async_commit();

  const float scale_log2 = rsqrtf(float(HD)) * kLog2e;
  float o[HD / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows gid, gid + 8 (log2 units)
  const int32_t tiles = (n_keys + KT - 1) / KT;
  for (int32_t t = 0; t < tiles; ++t) {
    cp_async_wait<0>();
    __syncthreads();  // tile t is in; everyone is done with tile t - 1's buffer
    if (t + 1 < tiles)
      load_keys<HD, KT, 128>(a, b, g, cb, n_ctx, n_keys, (t + 1) * KT, ks + ((t + 1) & 1) * KT * S,
                             vs + ((t + 1) & 1) * KT * S);
    cp_async_commit();
    const bf16* kt = ks + (t & 1) * KT * S;
    const bf16* vt = vs + (t & 1) * KT * S;

    float s[KT / 8][4] = {};
#pragma unroll
    for (int c = 0; c < HD; c += 16) {
      uint32_t qa[4];
      gpu::ldmatrix_x4(qa, a_address<S>(qs, r0, c, lane));
#pragma unroll
      for (int n = 0; n < KT; n += 16) {
        uint32_t kb[4];
        gpu::ldmatrix_x4(kb, bt_address<S>(kt, n, c, lane));
        gpu::mma_bf16_16816(s[n / 8], qa, kb[0], kb[1]);
        gpu::mma_bf16_16816(s[n / 8 + 1], qa, kb[2], kb[3]);
      }
    }
    // Scaled scores in log2 units; keys past the list are -inf. Every tile holds key t * KT.
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < KT / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int32_t key = t * KT + n * 8 + tig * 2 + (e & 1);
        s[n][e] = key < n_keys ? s[n][e] * scale_log2 : -INFINITY;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], s[n][e]);
      }
    float correction[2];
    online_softmax_step(tile_max, m, l, correction);
#pragma unroll
    for (int n = 0; n < KT / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = exp2f(s[n][e] - m[e / 2]);
        l[e / 2] += s[n][e];
      }
#pragma unroll
    for (int n = 0; n < HD / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[n][e] *= correction[e / 2];
#pragma unroll
    for (int k = 0; k < KT; k += 16) {
      uint32_t pa[4];
      accumulators_to_a(pa, s[k / 8], s[k / 8 + 1]);
#pragma unroll
      for (int c = 0; c < HD; c += 16) {
        uint32_t vb[4];
        gpu::ldmatrix_x4_trans(vb, b_address<S>(vt, k, c, lane));
        gpu::mma_bf16_16816(o[c / 8], pa, vb[0], vb[1]);
        gpu::mma_bf16_16816(o[c / 8 + 1], pa, vb[2], vb[3]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xFFFFFFFFu, l[r], 1);
    l[r] += __shfl_xor_sync(0xFFFFFFFFu, l[r], 2);
    const uint32_t v = v0 + uint32_t(r0 + gid + 8 * r);
    if (v >= nv) continue;
    const uint64_t index = query_index(d, b, g, v);
    const float inv = 1.0f / l[r];
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      const float lo = o[n][2 * r] * inv, hi = o[n][2 * r + 1] * inv;
      if (a.out)
        *reinterpret_cast<float2*>(a.out + index * HD + n * 8 + tig * 2) = make_float2(lo, hi);
      if (a.out_bf16)
        *reinterpret_cast<uint32_t*>(a.out_bf16 + index * HD + n * 8 + tig * 2) = pack_bf16(lo, hi);
    }
    if (tig == 0) a.lse_w[index] = m[r] * kLn2 + logf(l[r]);
  }
}

// ---- Backward, query side: dq -----------------------------------------------------------

template <int HD, int KT>
__global__ void __launch_bounds__(128) backward_query_kernel(Args a) {
  constexpr int S = HD + kPadElems;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* qs = reinterpret_cast<bf16*>(smem_raw);
  bf16* dos = qs + kRows * S;
  bf16* ks = dos + kRows * S;  // [2][KT][S]
  bf16* vs = ks + 2 * KT * S;  // [2][KT][S]
  const BlockAttentionDims& d = a.d;
  const QueryTile tile = query_tile(d, a.context, kRows, a.order);
  const uint32_t b = tile.b, g = tile.g, nv = tile.nv, v0 = tile.v0;
  const int32_t cb = tile.cb, n_ctx = tile.n_ctx, n_keys = tile.n_keys;
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
  const int gid = lane / 4, tig = lane % 4, r0 = warp * kWarpRows;
  load_query_tiles<HD, kRows, 128>(qs, dos, a.t, QueryIndexer(d, g), b, v0, nv);
  load_keys<HD, KT, 128>(a, b, g, cb, n_ctx, n_keys, 0, ks, vs);
  cp_async_commit();
  float lse2[2], delta[2];  // rows gid, gid + 8; lse in log2 units
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint32_t v = v0 + uint32_t(r0 + gid + 8 * r);
    const uint64_t index = v < nv ? query_index(d, b, g, v) : 0;
    lse2[r] = v < nv ? a.lse[index] * kLog2e : 0.0f;
    delta[r] = v < nv ? a.delta[index] : 0.0f;
  }

  const float scale_log2 = rsqrtf(float(HD)) * kLog2e;
  float dq[HD / 8][4] = {};
  const int32_t tiles = (n_keys + KT - 1) / KT;
  for (int32_t t = 0; t < tiles; ++t) {
    cp_async_wait<0>();
    __syncthreads();
    if (t + 1 < tiles)
      load_keys<HD, KT, 128>(a, b, g, cb, n_ctx, n_keys, (t + 1) * KT, ks + ((t + 1) & 1) * KT * S,
                             vs + ((t + 1) & 1) * KT * S);
    cp_async_commit();
    const bf16* kt = ks + (t & 1) * KT * S;
    const bf16* vt = vs + (t & 1) * KT * S;

    float s[KT / 8][4] = {}, dp[KT / 8][4] = {};
#pragma unroll
    for (int c = 0; c < HD; c += 16) {
      uint32_t qa[4], oa[4];
      gpu::ldmatrix_x4(qa, a_address<S>(qs, r0, c, lane));
      gpu::ldmatrix_x4(oa, a_address<S>(dos, r0, c, lane));
#pragma unroll
      for (int n = 0; n < KT; n += 16) {
        uint32_t kb[4], vb[4];
        gpu::ldmatrix_x4(kb, bt_address<S>(kt, n, c, lane));
        gpu::ldmatrix_x4(vb, bt_address<S>(vt, n, c, lane));
        gpu::mma_bf16_16816(s[n / 8], qa, kb[0], kb[1]);
        gpu::mma_bf16_16816(s[n / 8 + 1], qa, kb[2], kb[3]);
        gpu::mma_bf16_16816(dp[n / 8], oa, vb[0], vb[1]);
        gpu::mma_bf16_16816(dp[n / 8 + 1], oa, vb[2], vb[3]);
      }
    }
    // dS = P (dP - delta), in s.
#pragma unroll
    for (int n = 0; n < KT / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int32_t key = t * KT + n * 8 + tig * 2 + (e & 1);
        const float p = key < n_keys ? exp2f(s[n][e] * scale_log2 - lse2[e / 2]) : 0.0f;
        s[n][e] = p * (dp[n][e] - delta[e / 2]);
      }
#pragma unroll
    for (int k = 0; k < KT; k += 16) {
      uint32_t dsa[4];
      accumulators_to_a(dsa, s[k / 8], s[k / 8 + 1]);
#pragma unroll
      for (int c = 0; c < HD; c += 16) {
        uint32_t kb[4];
        gpu::ldmatrix_x4_trans(kb, b_address<S>(kt, k, c, lane));
        gpu::mma_bf16_16816(dq[c / 8], dsa, kb[0], kb[1]);
        gpu::mma_bf16_16816(dq[c / 8 + 1], dsa, kb[2], kb[3]);
      }
    }
  }
  const float scale = rsqrtf(float(HD));
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint32_t v = v0 + uint32_t(r0 + gid + 8 * r);
    if (v >= nv) continue;
    float* dst = a.dq + query_index(d, b, g, v) * HD;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n)
      *reinterpret_cast<float2*>(dst + n * 8 + tig * 2) =
          make_float2(dq[n][2 * r] * scale, dq[n][2 * r + 1] * scale);
  }
}

// ---- Backward, key side: dk, dv ---------------------------------------------------------

// Warps (warp % 4) own 16 keys each; with Split 2 (head_dim 256, to keep the accumulators
// in registers) warps w and w + 4 share those keys, each recomputing their scores and
// accumulating half of the columns. Queries stream in tiles of QT, 32 at a time.
template <int HD, int QT, int Split>
__global__ void __launch_bounds__(128 * Split) backward_key_kernel(Args a) {
  constexpr int S = HD + kPadElems, Threads = 128 * Split, DW = HD / Split;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* ks = reinterpret_cast<bf16*>(smem_raw);
  bf16* vs = ks + kRows * S;
  bf16* qs = vs + kRows * S;                                  // [2][QT][S]
  bf16* dos = qs + 2 * QT * S;                                // [2][QT][S]
  float* lse_s = reinterpret_cast<float*>(dos + 2 * QT * S);  // [2][QT], log2 units
  float* delta_s = lse_s + 2 * QT;                            // [2][QT]
  const BlockAttentionDims& d = a.d;
  const BlockKeyWork w = a.work[blockIdx.x];
  const uint32_t g = blockIdx.y, nv = d.block_size * (d.heads / d.kv_heads);
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
  const int gid = lane / 4, tig = lane % 4, r0 = (warp % 4) * kWarpRows;
  const int col0 = (warp / 4) * DW;
  const bool context_tile = w.kind == 0;
  const auto key_row = [&](const bf16* base) {
    return [&, base](int i) -> const bf16* {
      return i < w.keys ? base + (uint64_t(w.first_key + i) * d.kv_heads + g) * HD : nullptr;
    };
  };
  const bf16* k_src = context_tile ? a.t.ctx_k : a.t.block_k;
  const bf16* v_src = context_tile ? a.t.ctx_v : a.t.block_v;
  load_tile<HD, Threads>(ks, kRows, key_row(k_src), k_src);
  load_tile<HD, Threads>(vs, kRows, key_row(v_src), v_src);

  const KeyWorkQueries queries{a.context, w, nv};
  const QueryIndexer query_index_of(d, g);
  const auto load_queries = [&](int buf, int32_t blk, uint32_t v0) {
    load_query_tiles<HD, QT, Threads>(qs + buf * QT * S, dos + buf * QT * S, a.t, query_index_of,
                                      uint32_t(blk), v0, nv);
    if (int(threadIdx.x) < QT) {
      const uint32_t v = v0 + threadIdx.x;
      const uint64_t index = v < nv ? query_index_of(uint32_t(blk), v) : 0;
      lse_s[buf * QT + threadIdx.x] = v < nv ? a.lse[index] * kLog2e : 0.0f;
      delta_s[buf * QT + threadIdx.x] = v < nv ? a.delta[index] : 0.0f;
    }
  };
  int32_t blk = queries.next_seeing(w.first_block);
  uint32_t v0 = 0;
  if (blk < w.end_block) load_queries(0, blk, 0);
  cp_async_commit();

  const float scale_log2 = rsqrtf(float(HD)) * kLog2e;
  float dk[DW / 8][4] = {}, dv[DW / 8][4] = {};
  for (int buf = 0; blk < w.end_block; buf ^= 1) {
    int32_t next_blk = blk;
    uint32_t next_v0 = v0;
    queries.advance(next_blk, next_v0, QT);
    cp_async_wait<0>();
    __syncthreads();  // this tile is in; everyone is done with the other buffer
    if (next_blk < w.end_block) load_queries(buf ^ 1, next_blk, next_v0);
    cp_async_commit();
    const bf16* qt = qs + buf * QT * S;
    const bf16* dot = dos + buf * QT * S;
    const float* lse_t = lse_s + buf * QT;
    const float* delta_t = delta_s + buf * QT;
    bool visible[2];
    {
      const int32_t cb = a.context[2 * blk], ce = a.context[2 * blk + 1];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int32_t key = r0 + gid + 8 * r, row = w.first_key + key;
        visible[r] = key < w.keys && (!context_tile || (cb <= row && row < ce));
      }
    }
#pragma unroll 1
    for (int q0 = 0; q0 < QT; q0 += 32) {
      // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys and 32 queries.
      float s[4][4] = {}, dp[4][4] = {};
#pragma unroll
      for (int c = 0; c < HD; c += 16) {
        uint32_t ka[4], va[4];
        gpu::ldmatrix_x4(ka, a_address<S>(ks, r0, c, lane));
        gpu::ldmatrix_x4(va, a_address<S>(vs, r0, c, lane));
#pragma unroll
        for (int n = 0; n < 32; n += 16) {
          uint32_t qb[4], ob[4];
          gpu::ldmatrix_x4(qb, bt_address<S>(qt, q0 + n, c, lane));
          gpu::ldmatrix_x4(ob, bt_address<S>(dot, q0 + n, c, lane));
          gpu::mma_bf16_16816(s[n / 8], ka, qb[0], qb[1]);
          gpu::mma_bf16_16816(s[n / 8 + 1], ka, qb[2], qb[3]);
          gpu::mma_bf16_16816(dp[n / 8], va, ob[0], ob[1]);
          gpu::mma_bf16_16816(dp[n / 8 + 1], va, ob[2], ob[3]);
        }
      }
      // P^T into s, dS^T into dp; invisible keys and padding queries give zeros.
#pragma unroll
      for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qv = q0 + n * 8 + tig * 2 + (e & 1);
          const bool valid = visible[e / 2] && v0 + uint32_t(qv) < nv;
          const float p = valid ? exp2f(s[n][e] * scale_log2 - lse_t[qv]) : 0.0f;
          s[n][e] = p;
          dp[n][e] = p * (dp[n][e] - delta_t[qv]);
        }
#pragma unroll
      for (int k = 0; k < 32; k += 16) {
        uint32_t pa[4], dsa[4];
        accumulators_to_a(pa, s[k / 8], s[k / 8 + 1]);
        accumulators_to_a(dsa, dp[k / 8], dp[k / 8 + 1]);
#pragma unroll
        for (int c = 0; c < DW; c += 16) {
          uint32_t ob[4], qb[4];
          gpu::ldmatrix_x4_trans(ob, b_address<S>(dot, q0 + k, col0 + c, lane));
          gpu::ldmatrix_x4_trans(qb, b_address<S>(qt, q0 + k, col0 + c, lane));
          gpu::mma_bf16_16816(dv[c / 8], pa, ob[0], ob[1]);
          gpu::mma_bf16_16816(dv[c / 8 + 1], pa, ob[2], ob[3]);
          gpu::mma_bf16_16816(dk[c / 8], dsa, qb[0], qb[1]);
          gpu::mma_bf16_16816(dk[c / 8 + 1], dsa, qb[2], qb[3]);
        }
      }
    }
    blk = next_blk;
    v0 = next_v0;
  }
  cp_async_wait<0>();  // nothing may land in shared memory after the CTA ends

  const float scale = rsqrtf(float(HD));
  const KeyGradients out = key_gradients(a, w, g);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = r0 + gid + 8 * r;
    if (key >= w.keys) continue;
    float* dk_row = out.dk + uint64_t(key) * out.row_stride + col0;
    float* dv_row = out.dv + uint64_t(key) * out.row_stride + col0;
#pragma unroll
    for (int n = 0; n < DW / 8; ++n) {
      *reinterpret_cast<float2*>(dk_row + n * 8 + tig * 2) =
          make_float2(dk[n][2 * r] * scale, dk[n][2 * r + 1] * scale);
      *reinterpret_cast<float2*>(dv_row + n * 8 + tig * 2) =
          make_float2(dv[n][2 * r], dv[n][2 * r + 1]);
    }
  }
}

// The chunked tiles' gradients: their partial slots added in slot order.
__global__ void sum_partials_kernel(const BlockKeySum* sums, BlockAttentionDims d,
                                    const float* partial, float* d_ctx_k, float* d_ctx_v,
                                    float* d_block_k, float* d_block_v) {
  const BlockKeySum sum = sums[blockIdx.x];
  const uint32_t g = blockIdx.y, hd = d.head_dim, kv = d.kv_heads;
  const uint64_t slot_stride = 2ull * kv * kRows * hd;
  const float* first = partial + (uint64_t(sum.first_slot) * 2 * kv + g) * kRows * hd;
  float* dk = (sum.kind == 0 ? d_ctx_k : d_block_k) + (uint64_t(sum.first_key) * kv + g) * hd;
  float* dv = (sum.kind == 0 ? d_ctx_v : d_block_v) + (uint64_t(sum.first_key) * kv + g) * hd;
  const uint32_t quads = uint32_t(sum.keys) * hd / 4;
  for (uint32_t e = threadIdx.x; e < quads; e += blockDim.x) {
    const uint32_t key = e / (hd / 4), col = (e % (hd / 4)) * 4;
    float4 k = {0, 0, 0, 0}, v = {0, 0, 0, 0};
    for (int32_t s = 0; s < sum.slots; ++s) {
      const float* at = first + s * slot_stride + key * hd + col;
      const float4 pk = *reinterpret_cast<const float4*>(at);
      const float4 pv = *reinterpret_cast<const float4*>(at + uint64_t(kv) * kRows * hd);
      k = {k.x + pk.x, k.y + pk.y, k.z + pk.z, k.w + pk.w};
      v = {v.x + pv.x, v.y + pv.y, v.z + pv.z, v.w + pv.w};
    }
    *reinterpret_cast<float4*>(dk + uint64_t(key) * kv * hd + col) = k;
    *reinterpret_cast<float4*>(dv + uint64_t(key) * kv * hd + col) = v;
  }
}

// ---- Conversions ------------------------------------------------------------------------

struct ConvertJob {
  const float* src;
  bf16* dst;
  uint64_t count;  // a multiple of 8
};
struct ConvertJobs {
  ConvertJob job[4];
};

// blockIdx.y picks the job; eight values (32 bytes in, 16 out) per step.
__global__ void to_bf16_kernel(const __grid_constant__ ConvertJobs jobs) {
  const ConvertJob j = jobs.job[blockIdx.y];
  for (uint64_t i = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 8; i < j.count;
       i += uint64_t(gridDim.x) * blockDim.x * 8) {
    const float4 x = *reinterpret_cast<const float4*>(j.src + i);
    const float4 y = *reinterpret_cast<const float4*>(j.src + i + 4);
    uint4 packed;
    packed.x = pack_bf16(x.x, x.y);
    packed.y = pack_bf16(x.z, x.w);
    packed.z = pack_bf16(y.x, y.y);
    packed.w = pack_bf16(y.z, y.w);
    *reinterpret_cast<uint4*>(j.dst + i) = packed;
  }
}

// Four values of out from c as the products saw them: rounded to bf16.
__device__ float4 out_values(const float* out, uint64_t c) {
  const float4 x = *reinterpret_cast<const float4*>(out + c);
  return {__bfloat162float(__float2bfloat16_rn(x.x)), __bfloat162float(__float2bfloat16_rn(x.y)),
          __bfloat162float(__float2bfloat16_rn(x.z)), __bfloat162float(__float2bfloat16_rn(x.w))};
}
__device__ float4 out_values(const bf16* out, uint64_t c) {
  const uint2 packed = *reinterpret_cast<const uint2*>(out + c);
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&packed.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&packed.y));
  return {lo.x, lo.y, hi.x, hi.y};
}

// One warp per query vector: dout to bf16 and delta = dout . out in fp32, out in bf16 (as
// the output projection reads it, and as flash attention keeps it), so that the bf16
// forward need not write an fp32 out at all.
template <class TOut>
__global__ void delta_kernel(const TOut* out, const float* dout, uint64_t vectors, uint32_t hd,
                             bf16* dout_bf16, float* delta) {
  const uint64_t vector = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const uint32_t lane = threadIdx.x % 32;
  if (vector >= vectors) return;  // the whole warp
  const float* g = dout + vector * hd;
  float part = 0;
  for (uint32_t c = lane * 4; c < hd; c += 128) {
    const float4 x = out_values(out, vector * hd + c);
    const float4 y = *reinterpret_cast<const float4*>(g + c);
    part += x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
    uint2 packed;
    packed.x = pack_bf16(y.x, y.y);
    packed.y = pack_bf16(y.z, y.w);
    *reinterpret_cast<uint2*>(dout_bf16 + vector * hd + c) = packed;
  }
  for (int offset = 16; offset > 0; offset >>= 1)
    part += __shfl_xor_sync(0xFFFFFFFFu, part, offset);
  if (lane == 0) delta[vector] = part;
}

cudaError_t convert(const ConvertJobs& jobs, uint32_t count, cudaStream_t stream) {
  uint64_t largest = 0;
  for (uint32_t i = 0; i < count; ++i) largest = std::max(largest, jobs.job[i].count);
  if (largest == 0) return cudaSuccess;
  const uint64_t steps = (largest / 8 + 255) / 256;
  const auto grid_x = uint32_t(std::min<uint64_t>(steps, 4096));
  to_bf16_kernel<<<dim3(grid_x, count), 256, 0, stream>>>(jobs);
  return cudaGetLastError();
}

// ---- Workspace and launches -------------------------------------------------------------

size_t align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

struct Layout {
  size_t q, dout, ctx, block, partial, total;  // byte offsets of q, dout, ctx k/v, block k/v
};

Layout layout_of(const BlockAttentionShape& s, size_t slots) {
  const size_t rows = s.rows(), hd = s.head_dim;
  const size_t q_bytes = align_up(rows * s.heads * hd * sizeof(bf16));
  const size_t ctx_bytes = align_up(s.context_rows * s.kv_heads * hd * sizeof(bf16));
  const size_t block_bytes = align_up(rows * s.kv_heads * hd * sizeof(bf16));
  Layout l{};
  l.q = 0;
  l.dout = l.q + q_bytes;
  l.ctx = l.dout + q_bytes;
  l.block = l.ctx + 2 * ctx_bytes;
  l.partial = l.block + 2 * block_bytes;
  l.total = l.partial + slots * 2 * s.kv_heads * kRows * hd * sizeof(float);
  return l;
}

bool valid_dims(const BlockAttentionDims& d) {
  return block_attention_bf16_supported(d.head_dim) && d.kv_heads > 0 &&
         d.heads % d.kv_heads == 0 && d.block_size > 0 &&
         // QueryIndexer's bounds,
         uint64_t(d.block_size) * (d.heads / d.kv_heads) < (1u << 16) &&
         uint64_t(d.blocks) * d.block_size * d.heads < (1u << 31) &&
         // load_keys' 32-bit key rows
         (uint64_t(d.context_rows) + uint64_t(d.blocks) * d.block_size) * d.kv_heads < (1u << 31);
}

// The kernels' dims of a shape they take; false for one they do not.
bool kernel_dims(const BlockAttentionShape& shape, BlockAttentionDims& d) {
  return to_dims(shape, d) && valid_dims(d);
}

// Rounds q and the four key arrays into the workspace: the bf16 inputs of the calls below.
// Dims the kernels do not take are refused first (cudaErrorInvalidValue).
cudaError_t stage_inputs(const float* q, const float* ctx_k, const float* ctx_v,
                         const float* block_k, const float* block_v,
                         const BlockAttentionShape& shape, unsigned char* ws,
                         BlockAttentionBf16Inputs& staged, cudaStream_t stream) {
  BlockAttentionDims d;
  if (!kernel_dims(shape, d)) return cudaErrorInvalidValue;
  const Layout l = layout_of(shape, 0);
  const uint64_t rows = uint64_t(d.blocks) * d.block_size;
  const uint64_t ctx_count = uint64_t(d.context_rows) * d.kv_heads * d.head_dim;
  const uint64_t block_count = rows * d.kv_heads * d.head_dim;
  const size_t ctx_bytes = align_up(ctx_count * sizeof(bf16));
  const size_t block_bytes = align_up(block_count * sizeof(bf16));
  auto* qb = reinterpret_cast<bf16*>(ws + l.q);
  auto* ck = reinterpret_cast<bf16*>(ws + l.ctx);
  auto* cv = reinterpret_cast<bf16*>(ws + l.ctx + ctx_bytes);
  auto* bk = reinterpret_cast<bf16*>(ws + l.block);
  auto* bv = reinterpret_cast<bf16*>(ws + l.block + block_bytes);
  const auto bits = [](const bf16* p) { return reinterpret_cast<const uint16_t*>(p); };
  staged = {bits(qb), bits(ck), bits(cv), bits(bk), bits(bv)};
  ConvertJobs keys{{{ctx_k, ck, ctx_count},
                    {ctx_v, cv, ctx_count},
                    {block_k, bk, block_count},
                    {block_v, bv, block_count}}};
  if (cudaError_t e = convert(keys, 4, stream); e != cudaSuccess) return e;
  ConvertJobs queries{{{q, qb, rows * d.heads * d.head_dim}}};
  return convert(queries, 1, stream);
}

// The kernels' tensors: the inputs, and the workspace's dout.
Tensors tensors_of(const BlockAttentionBf16Inputs& in, const BlockAttentionShape& shape, void* ws) {
  const auto values = [](const uint16_t* p) { return reinterpret_cast<const bf16*>(p); };
  return {values(in.q),
          reinterpret_cast<const bf16*>(static_cast<unsigned char*>(ws) + layout_of(shape, 0).dout),
          values(in.ctx_k),
          values(in.ctx_v),
          values(in.block_k),
          values(in.block_v)};
}

// Key tile rows of the forward and dq kernels: 32, so that an SM's shared memory holds as
// many CTAs as their registers allow (four and three at head_dim 128; 64-key tiles fitted
// two).
constexpr int kKeyTileRows = 32;
// Query tile rows of the dk, dv kernel (its registers allow two CTAs an SM whatever the
// tile): smaller at head_dim 256 to keep two tiles in shared memory.
template <int HD>
constexpr int query_tile_rows() {
  return HD <= 128 ? 64 : 32;
}
template <int HD>
constexpr size_t row_bytes() {
  return size_t(HD + kPadElems) * sizeof(bf16);
}

template <int HD>
cudaError_t forward(const Args& a, cudaStream_t stream) {
  constexpr int KT = kKeyTileRows;
  constexpr size_t smem = (kRows + 4 * KT) * row_bytes<HD>();
  if (block_attention_wgmma_active(HD)) return launch_forward_wgmma(a, stream);
  return launch_kernel(forward_kernel<HD, KT>, query_grid(a.d, kRows), 128, smem, a, stream);
}

template <int HD>
cudaError_t backward(const Args& a, uint32_t work_count, cudaStream_t stream) {
  constexpr int KT = kKeyTileRows, QT = query_tile_rows<HD>(), Split = HD > 128 ? 2 : 1;
  constexpr size_t query_smem = (2 * kRows + 4 * KT) * row_bytes<HD>();
  constexpr size_t key_smem = (2 * kRows + 4 * QT) * row_bytes<HD>() + 4 * QT * sizeof(float);
  if (block_attention_wgmma_active(HD)) {
    if (cudaError_t e = launch_backward_query_wgmma(a, stream); e != cudaSuccess) return e;
    return launch_backward_key_wgmma(a, work_count, stream);
  }
  if (cudaError_t e = launch_kernel(backward_query_kernel<HD, KT>, query_grid(a.d, kRows), 128,
                                    query_smem, a, stream);
      e != cudaSuccess)
    return e;
  return launch_kernel(backward_key_kernel<HD, QT, Split>, dim3(work_count, a.d.kv_heads, 1),
                       128 * Split, key_smem, a, stream);
}

// Off when HSRING_BLOCK_ATTENTION_WGMMA=0 (benchmarks compare the two kernels so).
std::atomic<bool>& wgmma_wanted() {
  static std::atomic<bool> wanted{[] {
    const char* v = std::getenv("HSRING_BLOCK_ATTENTION_WGMMA");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }()};
  return wanted;
}

}  // namespace

void set_block_attention_wgmma(bool enabled) {
  wgmma_wanted().store(enabled, std::memory_order_relaxed);  // a setting: nothing to publish
}

bool block_attention_wgmma_active(uint32_t head_dim) {
  return wgmma_wanted().load(std::memory_order_relaxed) && wgmma_available(head_dim);
}

bool block_attention_bf16_supported(uint32_t head_dim) {
  return head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256;
}

BlockKeyPlan block_key_plan(const int32_t* context, const BlockAttentionShape& shape) {
  BlockAttentionDims d;
  if (!to_dims(shape, d)) return {};  // the launches refuse such a shape
  const uint32_t ctx_tiles = (d.context_rows + kRows - 1) / kRows;
  std::vector<int32_t> first(ctx_tiles, INT32_MAX), end(ctx_tiles, 0);
  for (uint32_t b = 0; b < d.blocks; ++b) {
    const int32_t begin = context[2 * b], stop = context[2 * b + 1];
    if (stop <= begin) continue;
    for (int32_t t = begin / kRows; t <= (stop - 1) / kRows; ++t) {
      first[size_t(t)] = std::min(first[size_t(t)], int32_t(b));
      end[size_t(t)] = std::max(end[size_t(t)], int32_t(b) + 1);
    }
  }
  size_t pairs = 0;
  for (uint32_t t = 0; t < ctx_tiles; ++t)
    if (end[t] > first[t]) pairs += size_t(end[t] - first[t]);
  // Chunks of 16 blocks, longer when there would be far more than enough of them.
  const auto chunk =
      int32_t(std::max<size_t>(kMinChunkBlocks, (pairs + kTargetChunks - 1) / kTargetChunks));
  BlockKeyPlan plan;
  int32_t slot = 0;
  for (uint32_t t = 0; t < ctx_tiles; ++t) {
    const auto first_key = int32_t(t * kRows);
    const int32_t keys = std::min<int32_t>(kRows, int32_t(d.context_rows) - first_key);
    if (end[t] <= first[t]) {  // no block sees it: one CTA writes its zeros
      plan.work.push_back({0, first_key, keys, 0, 0, -1});
      continue;
    }
    const int32_t chunks = (end[t] - first[t] + chunk - 1) / chunk;
    if (chunks == 1) {
      plan.work.push_back({0, first_key, keys, first[t], end[t], -1});
      continue;
    }
    plan.sums.push_back({0, first_key, keys, slot, chunks});
    for (int32_t c = 0; c < chunks; ++c) {
      const int32_t from = first[t] + c * chunk;
      plan.work.push_back({0, first_key, keys, from, std::min(end[t], from + chunk), slot++});
    }
  }
  for (uint32_t b = 0; b < d.blocks; ++b)
    for (uint32_t k0 = 0; k0 < d.block_size; k0 += kRows)
      plan.work.push_back({1, int32_t(b * d.block_size + k0),
                           int32_t(std::min<uint32_t>(kRows, d.block_size - k0)), int32_t(b),
                           int32_t(b) + 1, -1});
  // The most blocks first (ties keep their order), as longest_context_first orders the
  // query side: the grid ends on its smallest items, not on a full chunk started last.
  std::stable_sort(plan.work.begin(), plan.work.end(),
                   [](const BlockKeyWork& x, const BlockKeyWork& y) {
                     return x.end_block - x.first_block > y.end_block - y.first_block;
                   });
  plan.partial_slots = size_t(slot);
  return plan;
}

std::vector<int32_t> longest_context_first(const int32_t* context, uint32_t blocks) {
  std::vector<int32_t> order(blocks);
  for (uint32_t b = 0; b < blocks; ++b) order[b] = int32_t(b);
  const auto length = [context](int32_t b) { return context[2 * b + 1] - context[2 * b]; };
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t x, int32_t y) { return length(x) > length(y); });
  return order;
}

size_t block_attention_bf16_workspace_bytes(const BlockAttentionShape& shape,
                                            size_t partial_slots) {
  return layout_of(shape, partial_slots).total;
}

cudaError_t launch_block_attention_forward_bf16(const float* q, const float* ctx_k,
                                                const float* ctx_v, const float* block_k,
                                                const float* block_v, const int32_t* context,
                                                const BlockAttentionShape& shape, void* workspace,
                                                float* out, float* lse, cudaStream_t stream) {
  BlockAttentionBf16Inputs staged{};
  if (cudaError_t e = stage_inputs(q, ctx_k, ctx_v, block_k, block_v, shape,
                                   static_cast<unsigned char*>(workspace), staged, stream);
      e != cudaSuccess)
    return e;
  return launch_block_attention_forward_bf16(staged, context, shape, workspace, out, lse, stream);
}

cudaError_t launch_block_attention_forward_bf16(const BlockAttentionBf16Inputs& in,
                                                const int32_t* context,
                                                const BlockAttentionShape& shape, void* workspace,
                                                float* out, float* lse, cudaStream_t stream,
                                                uint16_t* out_bf16, const int32_t* block_order) {
  BlockAttentionDims dims;
  if (!kernel_dims(shape, dims) || (!out && !out_bf16)) return cudaErrorInvalidValue;
  Args a{};
  a.t = tensors_of(in, shape, workspace);
  a.context = context;
  a.order = block_order;
  a.d = dims;
  a.out = out;
  a.lse_w = lse;
  a.out_bf16 = reinterpret_cast<bf16*>(out_bf16);
  switch (dims.head_dim) {
    case 32:
      return forward<32>(a, stream);
    case 64:
      return forward<64>(a, stream);
    case 128:
      return forward<128>(a, stream);
    default:
      return forward<256>(a, stream);
  }
}

namespace {

// Both backward calls, out fp32 (rounded to bf16 where delta reads it) or bf16.
template <class TOut>
cudaError_t backward_from(const BlockAttentionBf16Inputs& in, const TOut* out, const float* dout,
                          const float* lse, const int32_t* context, const BlockKeyWork* work,
                          uint32_t work_count, const BlockKeySum* sums, uint32_t sum_count,
                          const BlockAttentionShape& shape, void* workspace, float* delta,
                          float* dq, float* d_ctx_k, float* d_ctx_v, float* d_block_k,
                          float* d_block_v, cudaStream_t stream, const int32_t* block_order) {
  BlockAttentionDims dims;
  if (!kernel_dims(shape, dims)) return cudaErrorInvalidValue;
  auto* ws = static_cast<unsigned char*>(workspace);
  Args a{};
  a.t = tensors_of(in, shape, workspace);
  const uint64_t vectors = uint64_t(dims.blocks) * dims.block_size * dims.heads;
  if (vectors > 0) {
    const auto grid = uint32_t((vectors * 32 + 255) / 256);
    delta_kernel<<<grid, 256, 0, stream>>>(out, dout, vectors, dims.head_dim,
                                           const_cast<bf16*>(a.t.dout), delta);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  a.lse = lse;
  a.delta = delta;
  a.context = context;
  a.order = block_order;
  a.work = work;
  a.d = dims;
  a.dq = dq;
  a.d_ctx_k = d_ctx_k;
  a.d_ctx_v = d_ctx_v;
  a.d_block_k = d_block_k;
  a.d_block_v = d_block_v;
  a.partial = reinterpret_cast<float*>(ws + layout_of(shape, 0).partial);
  cudaError_t e;
  switch (dims.head_dim) {
    case 32:
      e = backward<32>(a, work_count, stream);
      break;
    case 64:
      e = backward<64>(a, work_count, stream);
      break;
    case 128:
      e = backward<128>(a, work_count, stream);
      break;
    default:
      e = backward<256>(a, work_count, stream);
      break;
  }
  if (e != cudaSuccess || sum_count == 0 || dims.kv_heads == 0) return e;
  sum_partials_kernel<<<dim3(sum_count, dims.kv_heads), 256, 0, stream>>>(
      sums, dims, a.partial, d_ctx_k, d_ctx_v, d_block_k, d_block_v);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_block_attention_backward_bf16(
    const float* q, const float* ctx_k, const float* ctx_v, const float* block_k,
    const float* block_v, const float* out, const float* dout, const float* lse,
    const int32_t* context, const BlockKeyWork* work, uint32_t work_count, const BlockKeySum* sums,
    uint32_t sum_count, const BlockAttentionShape& shape, void* workspace, float* delta, float* dq,
    float* d_ctx_k, float* d_ctx_v, float* d_block_k, float* d_block_v, cudaStream_t stream) {
  BlockAttentionBf16Inputs staged{};
  if (cudaError_t e = stage_inputs(q, ctx_k, ctx_v, block_k, block_v, shape,
                                   static_cast<unsigned char*>(workspace), staged, stream);
      e != cudaSuccess)
    return e;
  return backward_from(staged, out, dout, lse, context, work, work_count, sums, sum_count, shape,
                       workspace, delta, dq, d_ctx_k, d_ctx_v, d_block_k, d_block_v, stream,
                       nullptr);
}

cudaError_t launch_block_attention_backward_bf16(
    const BlockAttentionBf16Inputs& in, const uint16_t* out, const float* dout, const float* lse,
    const int32_t* context, const BlockKeyWork* work, uint32_t work_count, const BlockKeySum* sums,
    uint32_t sum_count, const BlockAttentionShape& shape, void* workspace, float* delta, float* dq,
    float* d_ctx_k, float* d_ctx_v, float* d_block_k, float* d_block_v, cudaStream_t stream,
    const int32_t* block_order) {
  return backward_from(in, reinterpret_cast<const bf16*>(out), dout, lse, context, work, work_count,
                       sums, sum_count, shape, workspace, delta, dq, d_ctx_k, d_ctx_v, d_block_k,
                       d_block_v, stream, block_order);
}

}  // namespace hsring::train
