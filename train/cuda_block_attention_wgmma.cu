// The bf16 block attention (train/cuda_block_attention_bf16.h) on Hopper's warpgroup
// products (gpu/wgmma.cuh), for head_dim 128: the forward, dq and dk/dv. Built for sm_90a
// only; the launchers in train/cuda_block_attention_bf16.cu take these kernels where the
// GPU runs them and the mma.sync ones elsewhere. Arguments, work items, partial slots and
// outputs are the mma.sync kernels': only the products change.
//
// One warpgroup (four warps) per CTA owns 64 rows: keys on the key side, query vectors on
// the query side; the other side's tiles of 64 stream through shared memory, double
// buffered, in the 128-byte swizzle. Scores come from two shared-memory operands (K-major);
// the products that contract over the streamed rows (dV += P^T dO, dK += dS^T Q, dQ += dS K,
// O += P V) take the scores, rounded to bf16, as register A fragments and read the same
// tiles MN-major. Each mma.sync product fed one warp's 16 rows from fragments that warp
// loaded itself; here one instruction feeds 64 rows straight from shared memory, which is
// what let the tensor cores outrun the mma.sync kernels' loads.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "gpu/wgmma.cuh"
#include "train/block_attention_bf16_device.cuh"
#include "train/block_attention_wgmma.cuh"

namespace hsring::train::attention_bf16 {

namespace {

namespace wgmma = gpu::wgmma;

constexpr int kHd = 128;
constexpr int kQueryTile = 64;  // query vectors per tile: the S^T product's N
constexpr int kThreads = 128;   // one warpgroup
constexpr uint32_t kTile = wgmma::tile_bytes(kHd);
static_assert(kRows == wgmma::kTileRows && kQueryTile == wgmma::kTileRows &&
                  kThreads == 8 * (kHd / 8),
              "a thread's loads: a fixed row in each group of 8, a fixed chunk");

// This thread's place in the warpgroup's accumulators: rows warp * 16 + gid (+ 8), columns
// 8 j + 2 tig (+ 1).
struct Lane {
  int warp, gid, tig;
};
__device__ Lane accumulator_lane() {
  const int t = int(threadIdx.x);
  return {t / 32, t % 32 / 4, t % 4};
}

// Rows [0, 64) of a tile, thread t loading row 8 i + t % 8, columns [8 (t / 8), + 8) for
// each i: eight rows of 64 contiguous bytes a warp from global memory, 512 contiguous bytes
// a warp into shared memory. source(row) is the row's first element, or null (zeros).
template <class Source>
__device__ void load_rows(unsigned char* tile, Source source, const bf16* any) {
  const int t = int(threadIdx.x), chunk = t / 8;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int row = 8 * i + t % 8;
    const bf16* src = source(row);
    cp_async16(tile + wgmma::offset_of(row, chunk), src ? src + chunk * 8 : any, src != nullptr);
  }
}

// Query vectors [v0, v0 + 64) of block b (zeros from nv on) into a q tile and, unless
// null, a dout tile; each of a thread's rows indexed once for both.
__device__ void load_query_rows(unsigned char* q_tile, unsigned char* dout_tile, const Tensors& t,
                                const QueryIndexer& index_of, uint32_t b, uint32_t v0,
                                uint32_t nv) {
  const int chunk = int(threadIdx.x) / 8;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int row = 8 * i + int(threadIdx.x) % 8;
    const uint32_t v = v0 + uint32_t(row);
    const bool valid = v < nv;
    const uint64_t at = valid ? uint64_t(index_of(b, v)) * kHd + chunk * 8 : 0;
    const uint32_t offset = wgmma::offset_of(row, chunk);
    cp_async16(q_tile + offset, t.q + at, valid);
    if (dout_tile) cp_async16(dout_tile + offset, t.dout + at, valid);
  }
}

// Keys [k0, k0 + 64) of a query tile's key list (its context rows, then its block's own
// rows; zeros from n_keys on) into a k tile and a v tile.
__device__ void load_key_rows(unsigned char* k_tile, unsigned char* v_tile, const Args& a,
                              const QueryTile& q, int32_t k0) {
  const int chunk = int(threadIdx.x) / 8;
  const uint32_t block_row0 = q.b * a.d.block_size, kv = a.d.kv_heads;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int row = 8 * i + int(threadIdx.x) % 8;
    const int32_t key = k0 + row;
    const bool valid = key < q.n_keys, context = key < q.n_ctx;
    const uint32_t key_row = context ? uint32_t(q.cb + key) : block_row0 + uint32_t(key - q.n_ctx);
    const uint64_t at = valid ? uint64_t(key_row * kv + q.g) * kHd + chunk * 8 : 0;
    const uint32_t offset = wgmma::offset_of(row, chunk);
    cp_async16(k_tile + offset, (context ? a.t.ctx_k : a.t.block_k) + at, valid);
    cp_async16(v_tile + offset, (context ? a.t.ctx_v : a.t.block_v) + at, valid);
  }
}

// The dynamic shared memory window from its first 1024-byte boundary (the swizzle's
// atoms); each kernel's size has kAlignment bytes of room for it.
__device__ unsigned char* aligned_window(unsigned char* raw) {
  return raw + (wgmma::kAlignment - smem_address(raw) % wgmma::kAlignment) % wgmma::kAlignment;
}

// ---- Key side: dk, dv ---------------------------------------------------------------------

// One CTA per work item (up to 64 keys) and KV head. Per query tile: S^T = K Q^T and
// dP^T = V dO^T, then dV += P^T dO and dK += dS^T Q.
__global__ void __launch_bounds__(kThreads, 2) backward_key_wgmma_kernel(Args a) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* ks = aligned_window(smem_raw);
  unsigned char* vs = ks + kTile;
  unsigned char* qs = vs + kTile;                            // [2] tiles
  unsigned char* dos = qs + 2 * kTile;                       // [2] tiles
  float* lse_s = reinterpret_cast<float*>(dos + 2 * kTile);  // [2][64]
  float* delta_s = lse_s + 2 * kQueryTile;                   // [2][64]
  const BlockAttentionDims& d = a.d;
  const BlockKeyWork w = a.work[blockIdx.x];
  const uint32_t g = blockIdx.y, nv = d.block_size * (d.heads / d.kv_heads);
  const int t = int(threadIdx.x);
  const auto [warp, gid, tig] = accumulator_lane();
  const bool context_tile = w.kind == 0;

  const bf16* k_src = context_tile ? a.t.ctx_k : a.t.block_k;
  const bf16* v_src = context_tile ? a.t.ctx_v : a.t.block_v;
  const auto key_row = [&](const bf16* base) {
    return [&, base](int row) -> const bf16* {
      return row < w.keys ? base + (uint64_t(w.first_key + row) * d.kv_heads + g) * kHd : nullptr;
    };
  };
  load_rows(ks, key_row(k_src), k_src);
  load_rows(vs, key_row(v_src), v_src);

  const KeyWorkQueries queries{a.context, w, nv};
  const QueryIndexer index_of(d, g);
  const auto load_queries = [&](int buf, int32_t blk, uint32_t v0) {
    load_query_rows(qs + buf * kTile, dos + buf * kTile, a.t, index_of, uint32_t(blk), v0, nv);
    // lse and delta asynchronously too: a plain load here would hold the whole warpgroup
    // (its products are collective) for a global round trip every tile.
    if (t < kQueryTile) {
      const uint32_t v = v0 + uint32_t(t);
      const uint64_t index = v < nv ? index_of(uint32_t(blk), v) : 0;
      gpu::cp_async4(lse_s + buf * kQueryTile + t, a.lse + index, v < nv);
      gpu::cp_async4(delta_s + buf * kQueryTile + t, a.delta + index, v < nv);
    }
  };
  int32_t blk = queries.next_seeing(w.first_block);
  uint32_t v0 = 0;
  if (blk < w.end_block) load_queries(0, blk, 0);
  cp_async_commit();

  const uint32_t k_tile = smem_address(ks), v_tile = smem_address(vs);
  const float scale_log2 = rsqrtf(float(kHd)) * kLog2e;
  float dk[64] = {}, dv[64] = {};  // rows (keys) warp * 16 + gid (+ 8), wgmma's layout
  for (int buf = 0; blk < w.end_block; buf ^= 1) {
    int32_t next_blk = blk;
    uint32_t next_v0 = v0;
    queries.advance(next_blk, next_v0, kQueryTile);
    cp_async_wait<0>();
    wgmma::fence_shared_writes();
    __syncthreads();  // this tile is in; the last tile's products are done with the other
    if (next_blk < w.end_block) load_queries(buf ^ 1, next_blk, next_v0);
    cp_async_commit();
    const uint32_t q_tile = smem_address(qs + buf * kTile);
    const uint32_t o_tile = smem_address(dos + buf * kTile);
    const float* lse_t = lse_s + buf * kQueryTile;
    const float* delta_t = delta_s + buf * kQueryTile;
    bool visible[2], whole;
    {
      const int32_t cb = a.context[2 * blk], ce = a.context[2 * blk + 1];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int32_t key = warp * 16 + gid + 8 * r, row = w.first_key + key;
        visible[r] = key < w.keys && (!context_tile || (cb <= row && row < ce));
      }
      // Every key seen by every query vector of the tile (all but a context range's edges
      // and a block's last tile): the same for the whole CTA, so the masks are skipped.
      whole = w.keys == kRows && v0 + kQueryTile <= nv &&
              (!context_tile || (cb <= w.first_key && w.first_key + kRows <= ce));
    }

    // S^T = K Q^T, then dP^T = V dO^T, as two groups: P^T is formed while dP^T runs.
    float s[32], dp[32];
    wgmma::fence();
    wgmma::mma_64x64_tiles<kHd>(s, k_tile, q_tile);
    wgmma::commit();
    wgmma::mma_64x64_tiles<kHd>(dp, v_tile, o_tile);
    wgmma::commit();
    wgmma::wait<1>();
    wgmma::pin(s);
    // P^T; invisible keys and padding queries give zeros.
    if (whole) {
#pragma unroll
      for (int e = 0; e < 32; ++e) {
        const int qv = (e / 4) * 8 + tig * 2 + (e & 1);
        s[e] = exp2_ftz(fmaf(s[e], scale_log2, -lse_t[qv] * kLog2e));
      }
    } else {
#pragma unroll
      for (int e = 0; e < 32; ++e) {
        const int qv = (e / 4) * 8 + tig * 2 + (e & 1);
        const bool valid = visible[(e / 2) & 1] && v0 + uint32_t(qv) < nv;
        s[e] = valid ? exp2_ftz(fmaf(s[e], scale_log2, -lse_t[qv] * kLog2e)) : 0.0f;
      }
    }
    wgmma::wait<0>();
    wgmma::pin(dp);
#pragma unroll
    for (int e = 0; e < 32; ++e) {
      const int qv = (e / 4) * 8 + tig * 2 + (e & 1);
      dp[e] = s[e] * (dp[e] - delta_t[qv]);  // dS^T
    }
    uint32_t pa[4][4], dsa[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      wgmma::a_fragment(pa[kk], s, kk);
      wgmma::a_fragment(dsa[kk], dp, kk);
    }

    // dV += P^T dO, dK += dS^T Q: the query tiles read MN-major (the contraction over
    // queries, their rows).
    wgmma::pin(dk);
    wgmma::pin(dv);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma::mma_64x128_rs(dv, pa[kk], wgmma::mn_major(o_tile, kk));
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma::mma_64x128_rs(dk, dsa[kk], wgmma::mn_major(q_tile, kk));
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::pin(dk);
    wgmma::pin(dv);
    blk = next_blk;
    v0 = next_v0;
  }
  cp_async_wait<0>();  // nothing may land in shared memory after the CTA ends

  const float scale = rsqrtf(float(kHd));
  const KeyGradients out = key_gradients(a, w, g);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = warp * 16 + gid + 8 * r;
    if (key >= w.keys) continue;
    float* dk_row = out.dk + uint64_t(key) * out.row_stride;
    float* dv_row = out.dv + uint64_t(key) * out.row_stride;
#pragma unroll
    for (int j = 0; j < kHd / 8; ++j) {
      *reinterpret_cast<float2*>(dk_row + j * 8 + tig * 2) =
          make_float2(dk[4 * j + 2 * r] * scale, dk[4 * j + 2 * r + 1] * scale);
      *reinterpret_cast<float2*>(dv_row + j * 8 + tig * 2) =
          make_float2(dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
    }
  }
}

// ---- Query side: dq and the forward ------------------------------------------------------

// One warpgroup per 64 query vectors of one block and KV head (query_tile, longest context
// first when a.order is given); key tiles of 64 stream through shared memory, double
// buffered. Thread rows are warp * 16 + gid (+ 8), as the accumulators hold them.
struct QuerySide {
  unsigned char *qs, *dos, *ks, *vs;  // ks, vs: [2] tiles
  QueryTile q;
  int32_t tiles;
  __device__ QuerySide(unsigned char* window, const Args& a, bool with_dout) {
    qs = window;
    dos = qs + kTile;
    ks = dos + (with_dout ? kTile : 0);
    vs = ks + 2 * kTile;
    q = query_tile(a.d, a.context, kRows, a.order);
    tiles = (q.n_keys + kRows - 1) / kRows;
    load_query_rows(qs, with_dout ? dos : nullptr, a.t, QueryIndexer(a.d, q.g), q.b, q.v0, q.nv);
    load_key_rows(ks, vs, a, q, 0);
    cp_async_commit();
  }
  // Waits for key tile t, then starts loading tile t + 1 into the other buffer.
  __device__ void next_tile(const Args& a, int32_t t) {
    cp_async_wait<0>();
    wgmma::fence_shared_writes();
    __syncthreads();  // tile t is in; tile t - 1's products (waited for) are done with its buffer
    if (t + 1 < tiles)
      load_key_rows(ks + ((t + 1) & 1) * kTile, vs + ((t + 1) & 1) * kTile, a, q, (t + 1) * kRows);
    cp_async_commit();
  }
  __device__ uint32_t k_tile(int32_t t) const { return smem_address(ks + (t & 1) * kTile); }
  __device__ uint32_t v_tile(int32_t t) const { return smem_address(vs + (t & 1) * kTile); }
};

// acc (64 x 128) += P Y: P a 64 x 64 accumulator rounded to bf16 A fragments, Y a key tile
// read MN-major (the contraction over its 64 keys).
__device__ void accumulate_product(float (&acc)[64], const float (&p)[32], uint32_t y_tile) {
  uint32_t frag[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma::a_fragment(frag[kk], p, kk);
  wgmma::pin(acc);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma::mma_64x128_rs(acc, frag[kk], wgmma::mn_major(y_tile, kk));
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::pin(acc);
}

__global__ void __launch_bounds__(kThreads, 2) backward_query_wgmma_kernel(Args a) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  QuerySide side(aligned_window(smem_raw), a, true);
  const QueryTile& q = side.q;
  const auto [warp, gid, tig] = accumulator_lane();
  float lse2[2], delta[2];  // rows gid, gid + 8; lse in log2 units
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint32_t v = q.v0 + uint32_t(warp * 16 + gid + 8 * r);
    const uint64_t index = v < q.nv ? query_index(a.d, q.b, q.g, v) : 0;
    lse2[r] = v < q.nv ? a.lse[index] * kLog2e : 0.0f;
    delta[r] = v < q.nv ? a.delta[index] : 0.0f;
  }
  const uint32_t q_tile = smem_address(side.qs), o_tile = smem_address(side.dos);
  const float scale_log2 = rsqrtf(float(kHd)) * kLog2e;
  float dq[64] = {};
  for (int32_t t = 0; t < side.tiles; ++t) {
    side.next_tile(a, t);
    // S = Q K^T, then dP = dO V^T: P is formed while dP runs.
    float s[32], dp[32];
    wgmma::fence();
    wgmma::mma_64x64_tiles<kHd>(s, q_tile, side.k_tile(t));
    wgmma::commit();
    wgmma::mma_64x64_tiles<kHd>(dp, o_tile, side.v_tile(t));
    wgmma::commit();
    wgmma::wait<1>();
    wgmma::pin(s);
    if ((t + 1) * kRows <= q.n_keys) {  // a whole tile of keys (all but the last)
#pragma unroll
      for (int e = 0; e < 32; ++e) s[e] = exp2_ftz(s[e] * scale_log2 - lse2[(e / 2) & 1]);
    } else {
#pragma unroll
      for (int e = 0; e < 32; ++e) {
        const int32_t key = t * kRows + (e / 4) * 8 + tig * 2 + (e & 1);
        s[e] = key < q.n_keys ? exp2_ftz(s[e] * scale_log2 - lse2[(e / 2) & 1]) : 0.0f;
      }
    }
    wgmma::wait<0>();
    wgmma::pin(dp);
#pragma unroll
    for (int e = 0; e < 32; ++e) dp[e] = s[e] * (dp[e] - delta[(e / 2) & 1]);  // dS
    accumulate_product(dq, dp, side.k_tile(t));                                // dq += dS K
  }
  const float scale = rsqrtf(float(kHd));
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint32_t v = q.v0 + uint32_t(warp * 16 + gid + 8 * r);
    if (v >= q.nv) continue;
    float* dst = a.dq + query_index(a.d, q.b, q.g, v) * kHd;
#pragma unroll
    for (int j = 0; j < kHd / 8; ++j)
      *reinterpret_cast<float2*>(dst + j * 8 + tig * 2) =
          make_float2(dq[4 * j + 2 * r] * scale, dq[4 * j + 2 * r + 1] * scale);
  }
}

__global__ void __launch_bounds__(kThreads, 2) forward_wgmma_kernel(Args a) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  QuerySide side(aligned_window(smem_raw), a, false);
  const QueryTile& q = side.q;
  const auto [warp, gid, tig] = accumulator_lane();
  const uint32_t q_tile = smem_address(side.qs);
  const float scale_log2 = rsqrtf(float(kHd)) * kLog2e;
  float o[64] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows gid, gid + 8 (log2 units)
  for (int32_t t = 0; t < side.tiles; ++t) {
    side.next_tile(a, t);
    float s[32];
    wgmma::fence();
    wgmma::mma_64x64_tiles<kHd>(s, q_tile, side.k_tile(t));
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::pin(s);
    // Scaled scores in log2 units; keys past the list are -inf. Every tile holds key t * 64.
    float tile_max[2] = {-INFINITY, -INFINITY};
    const bool whole = (t + 1) * kRows <= q.n_keys;  // all but the last tile
#pragma unroll
    for (int e = 0; e < 32; ++e) {
      const int32_t key = t * kRows + (e / 4) * 8 + tig * 2 + (e & 1);
      s[e] = whole || key < q.n_keys ? s[e] * scale_log2 : -INFINITY;
      tile_max[(e / 2) & 1] = fmaxf(tile_max[(e / 2) & 1], s[e]);
    }
    float correction[2];
    online_softmax_step(tile_max, m, l, correction);
#pragma unroll
    for (int e = 0; e < 32; ++e) {
      s[e] = exp2_ftz(s[e] - m[(e / 2) & 1]);
      l[(e / 2) & 1] += s[e];
    }
#pragma unroll
    for (int e = 0; e < 64; ++e) o[e] *= correction[(e / 2) & 1];
    accumulate_product(o, s, side.v_tile(t));  // o += P V
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xFFFFFFFFu, l[r], 1);
    l[r] += __shfl_xor_sync(0xFFFFFFFFu, l[r], 2);
    const uint32_t v = q.v0 + uint32_t(warp * 16 + gid + 8 * r);
    if (v >= q.nv) continue;
    const uint64_t index = query_index(a.d, q.b, q.g, v);
    const float inv = 1.0f / l[r];
#pragma unroll
    for (int j = 0; j < kHd / 8; ++j) {
      const float lo = o[4 * j + 2 * r] * inv, hi = o[4 * j + 2 * r + 1] * inv;
      if (a.out)
        *reinterpret_cast<float2*>(a.out + index * kHd + j * 8 + tig * 2) = make_float2(lo, hi);
      if (a.out_bf16)
        *reinterpret_cast<uint32_t*>(a.out_bf16 + index * kHd + j * 8 + tig * 2) =
            pack_bf16(lo, hi);
    }
    if (tig == 0) a.lse_w[index] = m[r] * kLn2 + logf(l[r]);
  }
}

// Shared memory of each kernel: its tiles, and room to align them.
constexpr size_t kKeySmem =  // k, v, [2] q, dout, [2] lse, delta
    wgmma::kAlignment + 6 * size_t(kTile) + 4 * kQueryTile * sizeof(float);
constexpr size_t kQuerySmem = wgmma::kAlignment + 6 * size_t(kTile);    // q, dout, [2] k, v
constexpr size_t kForwardSmem = wgmma::kAlignment + 5 * size_t(kTile);  // q, [2] k, v

}  // namespace

bool wgmma_available(uint32_t head_dim) {
  if (head_dim != uint32_t(kHd)) return false;
  // The kernels have sm_90a images only: elsewhere there is nothing to launch. Asked once
  // (one process drives one GPU).
  static const bool available = [] {
    cudaFuncAttributes attributes{};
    const bool ok = cudaFuncGetAttributes(&attributes, backward_key_wgmma_kernel) == cudaSuccess;
    if (!ok) (void)cudaGetLastError();  // not an error: the caller takes the mma.sync kernels
    return ok;
  }();
  return available;
}

cudaError_t launch_backward_key_wgmma(const Args& a, uint32_t work_count, cudaStream_t stream) {
  return launch_kernel(backward_key_wgmma_kernel, dim3(work_count, a.d.kv_heads, 1), kThreads,
                       kKeySmem, a, stream);
}

cudaError_t launch_backward_query_wgmma(const Args& a, cudaStream_t stream) {
  return launch_kernel(backward_query_wgmma_kernel, query_grid(a.d, kRows), kThreads, kQuerySmem, a,
                       stream);
}

cudaError_t launch_forward_wgmma(const Args& a, cudaStream_t stream) {
  return launch_kernel(forward_wgmma_kernel, query_grid(a.d, kRows), kThreads, kForwardSmem, a,
                       stream);
}

}  // namespace hsring::train::attention_bf16
