// The DFlash block attention's kernels (train/cuda_block_attention.h). Shared-memory
// tiles: 64 query vectors (block rows x the query heads of one KV head) against 32 keys
// at a time; rows are padded by four floats so that they stay 16-byte aligned for the
// float4 reads of the score loops and eight lanes reading four columns of eight rows hit
// 32 distinct banks. Softmax statistics are kept in fp32 per query vector (online, as flash
// attention does); the backward recomputes probabilities from the forward's lse.
#include <cuda_runtime.h>

#include <algorithm>

#include "gpu/block_reduce.cuh"
#include "train/block_attention_tile.cuh"
#include "train/cuda_block_attention.h"

namespace hsring::train {

namespace {

using gpu::warp_max;
using gpu::warp_sum;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kQueries = 64;  // query vectors per CTA
constexpr int kKeys = 32;     // keys per tile
constexpr int kRowsPerWarp = kQueries / kWarps;
constexpr int kKeysPerWarp = kKeys / kWarps;
constexpr int kMaxPerLane = 8;  // head_dim up to 256
constexpr int kScoreStride = kKeys + 1;
constexpr int kKeyScoreStride = kQueries + 1;
constexpr int kPad = 4;  // floats after each head_dim row of a tile

// Four consecutive floats of a padded tile row (16-byte aligned: rows are HD + kPad floats).
__device__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }

// a += x . y over four components, in the order x, y, z, w (as the scalar loop summed).
__device__ void dot4(float& a, float4 x, float4 y) {
  a += x.x * y.x;
  a += x.y * y.y;
  a += x.z * y.z;
  a += x.w * y.w;
}

struct Args {
  const float *q, *ctx_k, *ctx_v, *block_k, *block_v, *out, *dout, *lse;
  const int32_t* context;
  const BlockKeyTile* tiles;
  BlockAttentionDims d;
  float *out_w, *lse_w, *delta, *dq, *d_ctx_k, *d_ctx_v, *d_block_k, *d_block_v;
};

// Key kk of block b's key list (its context rows, then its own rows) for KV head g.
template <int HD>
__device__ uint64_t key_offset(const BlockAttentionDims& d, int32_t context_begin,
                               int32_t context_keys, uint32_t b, uint32_t g, int32_t kk,
                               bool& from_context) {
  from_context = kk < context_keys;
  const uint64_t row = from_context ? uint64_t(context_begin + kk)
                                    : uint64_t(b) * d.block_size + uint64_t(kk - context_keys);
  return (row * d.kv_heads + g) * HD;
}

// Tile rows [k0, k0 + kKeys) of block b's key list into ks / vs (zeros past n_keys).
template <int HD>
__device__ void load_key_tile(const Args& a, int32_t cb, int32_t n_ctx, int32_t n_keys, uint32_t b,
                              uint32_t g, int32_t k0, float* ks, float* vs) {
  constexpr int S = HD + kPad;
  for (uint32_t e = threadIdx.x; e < uint32_t(kKeys * HD); e += kThreads) {
    const int32_t kk = int32_t(e / HD);
    const uint32_t col = e % HD;
    float kv = 0, vv = 0;
    if (k0 + kk < n_keys) {
      bool ctx;
      const uint64_t at = key_offset<HD>(a.d, cb, n_ctx, b, g, k0 + kk, ctx) + col;
      kv = ctx ? a.ctx_k[at] : a.block_k[at];
      vv = ctx ? a.ctx_v[at] : a.block_v[at];
    }
    ks[kk * S + col] = kv;
    vs[kk * S + col] = vv;
  }
}

// Query vectors [v0, v0 + kQueries) of block b (zeros past nv): q scaled by 1/sqrt(hd) into
// qs, and, when `second` is given, the same rows of `src2` into it.
template <int HD>
__device__ void load_queries(const Args& a, uint32_t b, uint32_t g, uint32_t v0, uint32_t nv,
                             float* qs, const float* src2, float* second) {
  constexpr int S = HD + kPad;
  const float scale = rsqrtf(float(HD));
  for (uint32_t e = threadIdx.x; e < uint32_t(kQueries * HD); e += kThreads) {
    const uint32_t i = e / HD, col = e % HD, v = v0 + i;
    const bool valid = v < nv;
    const uint64_t at = valid ? query_index(a.d, b, g, v) * HD + col : 0;
    qs[i * S + col] = valid ? a.q[at] * scale : 0.0f;
    if (second) second[i * S + col] = valid ? src2[at] : 0.0f;
  }
}

template <int P>
__global__ void __launch_bounds__(kThreads) forward_kernel(Args a) {
  constexpr int HD = 32 * P, S = HD + kPad;
  extern __shared__ __align__(16) float smem[];
  float* qs = smem;
  float* ks = qs + kQueries * S;
  float* vs = ks + kKeys * S;
  float* ps = vs + kKeys * S;
  float* row_max = ps + kQueries * kScoreStride;
  float* row_sum = row_max + kQueries;
  const BlockAttentionDims& d = a.d;
  const QueryTile tile = query_tile(d, a.context, kQueries);
  const uint32_t b = tile.b, g = tile.g, nv = tile.nv, v0 = tile.v0;
  const int32_t cb = tile.cb, n_ctx = tile.n_ctx, n_keys = tile.n_keys;
  if (v0 >= nv) return;  // the whole CTA
  const uint32_t tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  load_queries<HD>(a, b, g, v0, nv, qs, nullptr, nullptr);
  if (tid < kQueries) {
    row_max[tid] = -INFINITY;
    row_sum[tid] = 0;
  }
  float acc[kRowsPerWarp][P] = {};
  const uint32_t sr = (tid / 8) * 2, sk = tid % 8;  // scores of rows sr, sr + 1, keys sk + 8c
  for (int32_t k0 = 0; k0 < n_keys; k0 += kKeys) {
    __syncthreads();  // the last tile's keys and probabilities are used up
    load_key_tile<HD>(a, cb, n_ctx, n_keys, b, g, k0, ks, vs);
    __syncthreads();
    float s[2][4] = {};
    for (int x = 0; x < HD; x += 4) {
      const float4 q0 = load4(qs + sr * S + x), q1 = load4(qs + (sr + 1) * S + x);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float4 kx = load4(ks + (sk + 8 * c) * S + x);
        dot4(s[0][c], q0, kx);
        dot4(s[1][c], q1, kx);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int32_t key = int32_t(sk) + 8 * c;
        ps[(sr + r) * kScoreStride + key] = k0 + key < n_keys ? s[r][c] : -INFINITY;
      }
    __syncthreads();
    // Each warp owns rows warp * 8 .. + 7: their softmax update and their output rows.
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const uint32_t row = warp * kRowsPerWarp + i;
      const float x = ps[row * kScoreStride + lane];
      const float m_old = row_max[row];
      const float m_new = fmaxf(m_old, warp_max(x));  // finite: every tile has a key
      const float p = x == -INFINITY ? 0.0f : __expf(x - m_new);
      const float correction = m_old == -INFINITY ? 0.0f : __expf(m_old - m_new);
      const float total = warp_sum(p);
      ps[row * kScoreStride + lane] = p;
      __syncwarp();  // every lane has read row_max[row] before lane 0 moves it
      if (lane == 0) {
        row_max[row] = m_new;
        row_sum[row] = row_sum[row] * correction + total;
      }
#pragma unroll
      for (int e = 0; e < P; ++e) acc[i][e] *= correction;
    }
    __syncwarp();
    // Keys outermost: each value element is read from shared memory once for the warp's
    // rows (the loop is bound by shared-memory loads, not by the FMAs). Every acc[i][e]
    // still sums over the keys in order.
    for (int kk = 0; kk < kKeys; ++kk) {
      float vk[P];
#pragma unroll
      for (int e = 0; e < P; ++e) vk[e] = vs[kk * S + lane + 32 * e];
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const float p = ps[(warp * kRowsPerWarp + i) * kScoreStride + kk];
#pragma unroll
        for (int e = 0; e < P; ++e) acc[i][e] += p * vk[e];
      }
    }
  }
  __syncwarp();
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const uint32_t row = warp * kRowsPerWarp + i, v = v0 + row;
    if (v >= nv) continue;
    const uint64_t index = query_index(d, b, g, v);
    const float inv = 1.0f / row_sum[row];
#pragma unroll
    for (int e = 0; e < P; ++e) a.out_w[index * HD + lane + 32 * e] = acc[i][e] * inv;
    if (lane == 0) a.lse_w[index] = row_max[row] + logf(row_sum[row]);
  }
}

// dq = scale * sum_k p (dout . v_k - delta) k over block b's keys; delta = dout . out is
// stored for the key side.
template <int P>
__global__ void __launch_bounds__(kThreads) backward_query_kernel(Args a) {
  constexpr int HD = 32 * P, S = HD + kPad;
  extern __shared__ __align__(16) float smem[];
  float* qs = smem;
  float* dos = qs + kQueries * S;
  float* ks = dos + kQueries * S;
  float* vs = ks + kKeys * S;
  float* dss = vs + kKeys * S;
  float* lse_s = dss + kQueries * kScoreStride;
  float* delta_s = lse_s + kQueries;
  const BlockAttentionDims& d = a.d;
  const QueryTile tile = query_tile(d, a.context, kQueries);
  const uint32_t b = tile.b, g = tile.g, nv = tile.nv, v0 = tile.v0;
  const int32_t cb = tile.cb, n_ctx = tile.n_ctx, n_keys = tile.n_keys;
  if (v0 >= nv) return;
  const uint32_t tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  load_queries<HD>(a, b, g, v0, nv, qs, a.dout, dos);
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const uint32_t row = warp * kRowsPerWarp + i, v = v0 + row;
    const bool valid = v < nv;
    const uint64_t index = valid ? query_index(d, b, g, v) : 0;
    float part = 0;
    if (valid)
#pragma unroll
      for (int e = 0; e < P; ++e)
        part += dos[row * S + lane + 32 * e] * a.out[index * HD + lane + 32 * e];
    const float delta = warp_sum(part);
    if (lane == 0) {
      delta_s[row] = delta;
      lse_s[row] = valid ? a.lse[index] : 0.0f;
      if (valid) a.delta[index] = delta;
    }
  }
  float acc[kRowsPerWarp][P] = {};
  const uint32_t sr = (tid / 8) * 2, sk = tid % 8;
  for (int32_t k0 = 0; k0 < n_keys; k0 += kKeys) {
    __syncthreads();  // lse_s / delta_s written; the last tile used up
    load_key_tile<HD>(a, cb, n_ctx, n_keys, b, g, k0, ks, vs);
    __syncthreads();
    float s[2][4] = {}, dp[2][4] = {};
    for (int x = 0; x < HD; x += 4) {
      const float4 q0 = load4(qs + sr * S + x), q1 = load4(qs + (sr + 1) * S + x);
      const float4 o0 = load4(dos + sr * S + x), o1 = load4(dos + (sr + 1) * S + x);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float4 kx = load4(ks + (sk + 8 * c) * S + x);
        const float4 vx = load4(vs + (sk + 8 * c) * S + x);
        dot4(s[0][c], q0, kx);
        dot4(s[1][c], q1, kx);
        dot4(dp[0][c], o0, vx);
        dot4(dp[1][c], o1, vx);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int32_t key = int32_t(sk) + 8 * c;
        const uint32_t row = sr + r;
        const float p = k0 + key < n_keys ? __expf(s[r][c] - lse_s[row]) : 0.0f;
        dss[row * kScoreStride + key] = p * (dp[r][c] - delta_s[row]);
      }
    __syncthreads();
    // Keys outermost, as in the forward: one shared-memory read of each key element.
    for (int kk = 0; kk < kKeys; ++kk) {
      float kk_row[P];
#pragma unroll
      for (int e = 0; e < P; ++e) kk_row[e] = ks[kk * S + lane + 32 * e];
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const float ds = dss[(warp * kRowsPerWarp + i) * kScoreStride + kk];
#pragma unroll
        for (int e = 0; e < P; ++e) acc[i][e] += ds * kk_row[e];
      }
    }
  }
  const float scale = rsqrtf(float(HD));
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const uint32_t row = warp * kRowsPerWarp + i, v = v0 + row;
    if (v >= nv) continue;
    const uint64_t index = query_index(d, b, g, v);
#pragma unroll
    for (int e = 0; e < P; ++e) a.dq[index * HD + lane + 32 * e] = acc[i][e] * scale;
  }
}

// dv_k = sum p dout and dk_k = sum p (dout . v_k - delta) q_scaled over the query vectors
// of the tile's blocks that see key k.
template <int P>
__global__ void __launch_bounds__(kThreads) backward_key_kernel(Args a) {
  constexpr int HD = 32 * P, S = HD + kPad;
  extern __shared__ __align__(16) float smem[];
  float* ks = smem;
  float* vs = ks + kKeys * S;
  float* qs = vs + kKeys * S;
  float* dos = qs + kQueries * S;
  float* pt = dos + kQueries * S;
  float* dst = pt + kKeys * kKeyScoreStride;
  float* lse_s = dst + kKeys * kKeyScoreStride;
  float* delta_s = lse_s + kQueries;
  const BlockAttentionDims& d = a.d;
  const BlockKeyTile tile = a.tiles[blockIdx.x];
  const uint32_t g = blockIdx.y, nv = d.block_size * (d.heads / d.kv_heads);
  const uint32_t tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const bool context_tile = tile.kind == 0;
  const float* k_src = context_tile ? a.ctx_k : a.block_k;
  const float* v_src = context_tile ? a.ctx_v : a.block_v;
  for (uint32_t e = tid; e < uint32_t(kKeys * HD); e += kThreads) {
    const int32_t kk = int32_t(e / HD);
    const uint32_t col = e % HD;
    const bool valid = kk < tile.keys;
    const uint64_t at = valid ? (uint64_t(tile.first_key + kk) * d.kv_heads + g) * HD + col : 0;
    ks[kk * S + col] = valid ? k_src[at] : 0.0f;
    vs[kk * S + col] = valid ? v_src[at] : 0.0f;
  }
  float acc_k[kKeysPerWarp][P] = {}, acc_v[kKeysPerWarp][P] = {};
  const uint32_t key = tid / 8, sq = tid % 8;  // scores of key `key`, queries sq + 8c
  const int32_t row = tile.first_key + int32_t(key);
  for (int32_t blk = tile.first_block; blk < tile.end_block; ++blk) {
    const int32_t cb = a.context[2 * blk], ce = a.context[2 * blk + 1];
    if (context_tile && (ce <= tile.first_key || cb >= tile.first_key + tile.keys)) continue;
    const bool visible = int32_t(key) < tile.keys && (!context_tile || (cb <= row && row < ce));
    for (uint32_t v0 = 0; v0 < nv; v0 += kQueries) {
      __syncthreads();  // the keys are loaded; the last chunk is used up
      load_queries<HD>(a, uint32_t(blk), g, v0, nv, qs, a.dout, dos);
      if (tid < kQueries) {
        const uint32_t v = v0 + tid;
        const uint64_t index = v < nv ? query_index(d, uint32_t(blk), g, v) : 0;
        lse_s[tid] = v < nv ? a.lse[index] : 0.0f;
        delta_s[tid] = v < nv ? a.delta[index] : 0.0f;
      }
      __syncthreads();
      float s[8] = {}, dp[8] = {};
      for (int x = 0; x < HD; x += 4) {
        const float4 kx = load4(ks + key * S + x), vx = load4(vs + key * S + x);
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          dot4(s[c], kx, load4(qs + (sq + 8 * c) * S + x));
          dot4(dp[c], vx, load4(dos + (sq + 8 * c) * S + x));
        }
      }
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const uint32_t qv = sq + 8 * c;
        const float p = visible && v0 + qv < nv ? __expf(s[c] - lse_s[qv]) : 0.0f;
        pt[key * kKeyScoreStride + qv] = p;
        dst[key * kKeyScoreStride + qv] = p * (dp[c] - delta_s[qv]);
      }
      __syncthreads();
      // Query vectors outermost: each dout / q element is read from shared memory once
      // for the warp's keys. Every accumulator still sums over the queries in order.
      for (int qv = 0; qv < kQueries; ++qv) {
        float o[P], qx[P];
#pragma unroll
        for (int e = 0; e < P; ++e) {
          o[e] = dos[qv * S + lane + 32 * e];
          qx[e] = qs[qv * S + lane + 32 * e];
        }
#pragma unroll
        for (int i = 0; i < kKeysPerWarp; ++i) {
          const uint32_t k = warp * kKeysPerWarp + i;
          const float p = pt[k * kKeyScoreStride + qv], ds = dst[k * kKeyScoreStride + qv];
#pragma unroll
          for (int e = 0; e < P; ++e) {
            acc_v[i][e] += p * o[e];
            acc_k[i][e] += ds * qx[e];
          }
        }
      }
    }
  }
  float* dk = context_tile ? a.d_ctx_k : a.d_block_k;
  float* dv = context_tile ? a.d_ctx_v : a.d_block_v;
#pragma unroll
  for (int i = 0; i < kKeysPerWarp; ++i) {
    const int32_t k = int32_t(warp) * kKeysPerWarp + i;
    if (k >= tile.keys) continue;
    const uint64_t at = (uint64_t(tile.first_key + k) * d.kv_heads + g) * HD;
#pragma unroll
    for (int e = 0; e < P; ++e) {
      dk[at + lane + 32 * e] = acc_k[i][e];  // q was scaled: this is scale * sum ds q
      dv[at + lane + 32 * e] = acc_v[i][e];
    }
  }
}

template <int P>
constexpr size_t forward_smem() {
  return sizeof(float) *
         ((kQueries + 2 * kKeys) * (32 * P + kPad) + kQueries * kScoreStride + 2 * kQueries);
}
template <int P>
constexpr size_t query_smem() {
  return sizeof(float) *
         ((2 * kQueries + 2 * kKeys) * (32 * P + kPad) + kQueries * kScoreStride + 2 * kQueries);
}
template <int P>
constexpr size_t key_smem() {
  return sizeof(float) * ((2 * kQueries + 2 * kKeys) * (32 * P + kPad) +
                          2 * kKeys * kKeyScoreStride + 2 * kQueries);
}

template <int P>
cudaError_t forward(const Args& a, cudaStream_t stream) {
  return launch_kernel(forward_kernel<P>, query_grid(a.d, kQueries), kThreads, forward_smem<P>(), a,
                       stream);
}

template <int P>
cudaError_t backward(const Args& a, uint32_t tile_count, cudaStream_t stream) {
  if (cudaError_t e = launch_kernel(backward_query_kernel<P>, query_grid(a.d, kQueries), kThreads,
                                    query_smem<P>(), a, stream);
      e != cudaSuccess)
    return e;
  return launch_kernel(backward_key_kernel<P>, dim3(tile_count, a.d.kv_heads, 1), kThreads,
                       key_smem<P>(), a, stream);
}

bool valid_dims(const BlockAttentionDims& d) {
  return block_attention_supported(d.head_dim) && d.kv_heads > 0 && d.heads % d.kv_heads == 0 &&
         d.block_size > 0;
}

// The kernels' dims of a shape they take; false for one they do not.
bool kernel_dims(const BlockAttentionShape& shape, BlockAttentionDims& d) {
  return to_dims(shape, d) && valid_dims(d);
}

}  // namespace

bool block_attention_supported(uint32_t head_dim) {
  return head_dim > 0 && head_dim % 32 == 0 && head_dim <= 32 * kMaxPerLane;
}

std::vector<BlockKeyTile> block_key_tiles(const int32_t* context,
                                          const BlockAttentionShape& shape) {
  BlockAttentionDims d;
  if (!to_dims(shape, d)) return {};  // the launches refuse such a shape
  const uint32_t ctx_tiles = (d.context_rows + kKeys - 1) / kKeys;
  std::vector<BlockKeyTile> tiles(ctx_tiles);
  for (uint32_t t = 0; t < ctx_tiles; ++t) {
    const auto first = int32_t(t * kKeys);
    tiles[t] = {0, first, std::min<int32_t>(kKeys, int32_t(d.context_rows) - first), 0, 0};
  }
  // Each block widens the range of the tiles its context touches.
  std::vector<bool> seen(ctx_tiles, false);
  for (uint32_t b = 0; b < d.blocks; ++b) {
    const int32_t begin = context[2 * b], end = context[2 * b + 1];
    if (end <= begin) continue;
    for (int32_t t = begin / kKeys; t <= (end - 1) / kKeys; ++t) {
      BlockKeyTile& tile = tiles[size_t(t)];
      if (!seen[size_t(t)]) {
        tile.first_block = int32_t(b);
        seen[size_t(t)] = true;
      }
      tile.first_block = std::min(tile.first_block, int32_t(b));
      tile.end_block = std::max(tile.end_block, int32_t(b) + 1);
    }
  }
  for (uint32_t b = 0; b < d.blocks; ++b)
    for (uint32_t k0 = 0; k0 < d.block_size; k0 += kKeys)
      tiles.push_back({1, int32_t(b * d.block_size + k0),
                       int32_t(std::min<uint32_t>(kKeys, d.block_size - k0)), int32_t(b),
                       int32_t(b) + 1});
  return tiles;
}

cudaError_t launch_block_attention_forward(const float* q, const float* ctx_k, const float* ctx_v,
                                           const float* block_k, const float* block_v,
                                           const int32_t* context, const BlockAttentionShape& shape,
                                           float* out, float* lse, cudaStream_t stream) {
  BlockAttentionDims dims;
  if (!kernel_dims(shape, dims)) return cudaErrorInvalidValue;
  Args a{};
  a.q = q;
  a.ctx_k = ctx_k;
  a.ctx_v = ctx_v;
  a.block_k = block_k;
  a.block_v = block_v;
  a.context = context;
  a.d = dims;
  a.out_w = out;
  a.lse_w = lse;
  constexpr cudaError_t (*kForward[])(const Args&, cudaStream_t) = {
      nullptr,    forward<1>, forward<2>, forward<3>, forward<4>,
      forward<5>, forward<6>, forward<7>, forward<8>};
  return kForward[dims.head_dim / 32](a, stream);
}

cudaError_t launch_block_attention_backward(const float* q, const float* ctx_k, const float* ctx_v,
                                            const float* block_k, const float* block_v,
                                            const float* out, const float* dout, const float* lse,
                                            const int32_t* context, const BlockKeyTile* tiles,
                                            uint32_t tile_count, const BlockAttentionShape& shape,
                                            float* delta, float* dq, float* d_ctx_k, float* d_ctx_v,
                                            float* d_block_k, float* d_block_v,
                                            cudaStream_t stream) {
  BlockAttentionDims dims;
  if (!kernel_dims(shape, dims)) return cudaErrorInvalidValue;
  Args a{};
  a.q = q;
  a.ctx_k = ctx_k;
  a.ctx_v = ctx_v;
  a.block_k = block_k;
  a.block_v = block_v;
  a.out = out;
  a.dout = dout;
  a.lse = lse;
  a.context = context;
  a.tiles = tiles;
  a.d = dims;
  a.delta = delta;
  a.dq = dq;
  a.d_ctx_k = d_ctx_k;
  a.d_ctx_v = d_ctx_v;
  a.d_block_k = d_block_k;
  a.d_block_v = d_block_v;
  constexpr cudaError_t (*kBackward[])(const Args&, uint32_t, cudaStream_t) = {
      nullptr,     backward<1>, backward<2>, backward<3>, backward<4>,
      backward<5>, backward<6>, backward<7>, backward<8>};
  return kBackward[dims.head_dim / 32](a, tile_count, stream);
}

}  // namespace hsring::train
