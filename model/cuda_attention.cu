// Causal attention over packed documents, flash style: one block per (query tile, group
// of query heads) streams the keys and values of the tile's own document through shared
// memory in blocks of 64 and keeps an online softmax, so nothing of size T^2 (or doc^2) is
// ever stored. Query heads that share a KV head are packed into one block (its 64 rows are
// 64 / pack tokens x pack heads), so each K/V block is read from memory once per KV head,
// not once per query head.
// Products run on bf16 tensor cores (mma.sync m16n8k16, fp32 accumulation); the softmax
// is fp32. Each output row is computed by one warp in a fixed key order: no atomics, no
// split over keys, so the result is bit-reproducible and independent of the other tiles.
// On an H100 or H200 at head_dim 128 and 256, launch_attention takes the same tiles to
// warpgroup products instead (model/cuda_attention_wgmma.cu).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "gpu/bf16.cuh"
#include "gpu/cp_async.cuh"
#include "gpu/mma.cuh"
#include "model/cuda_attention_wgmma.h"
#include "model/cuda_kernels.h"

namespace hsring {

namespace {

constexpr int kRows = int(kAttentionTileRows);  // (token, head) rows per block, 16 per warp
constexpr int kThreads = 128;

// Shared-memory rows are padded by 16 bytes so the 8 rows a fragment load touches fall in
// different banks.
template <int D>
constexpr int kStride = D + 8;

template <int D, int kKeys>
constexpr size_t smem_bytes() {
  return size_t(kRows + 4 * kKeys) * kStride<D> * sizeof(Bf16);  // q, then k and v twice
}

__device__ __forceinline__ uint32_t load_pair(const Bf16* smem) {
  return *reinterpret_cast<const uint32_t*>(smem);
}

// Starts copying a kTileRows-row tile into shared memory [kTileRows][kStride]: row r is token
// row0 + (r >> shift), columns col0 + (r & (2^shift - 1)) * D .. + D of a [*, stride] bf16
// matrix (shift 0: 64 tokens, one head; shift s: 64 >> s tokens, 2^s adjacent heads).
// Rows of tokens at or past `limit` become zeros.
template <int D, int kTileRows>
__device__ __forceinline__ void load_tile(Bf16* tile, const Bf16* src, int row0, int shift,
                                          int limit, size_t stride, size_t col0) {
  constexpr int kChunks = D / 8;  // 16-byte pieces per row
  for (int c = threadIdx.x; c < kTileRows * kChunks; c += kThreads) {
    const int r = c / kChunks;
    const int piece = c % kChunks;
    const int token = row0 + (r >> shift);
    const bool valid = token < limit;
    const Bf16* from = src + size_t(valid ? token : 0) * stride + col0 +
                       size_t(r & ((1 << shift) - 1)) * D + piece * 8;
    gpu::cp_async16(tile + r * kStride<D> + piece * 8, from, valid);
  }
}

// Fragment layout of m16n8k16 (PTX ISA): lane = 4 g + t holds rows g and g + 8, and
// columns 2t, 2t + 1 (+ 8) of each 8-wide piece. A score tile's accumulator is therefore
// already the A fragment of P for the P V product, with no shuffle. kKeys: keys per block
// of the stream (32 or 64).
template <int D, int kKeys>
__global__ void __launch_bounds__(kThreads)
    attention_kernel(const Bf16* __restrict__ q, const Bf16* __restrict__ k,
                     const Bf16* __restrict__ v, const AttentionTile* __restrict__ tiles, int heads,
                     int group, int pack_shift, float scale_log2, Bf16* __restrict__ out) {
  constexpr int S = kStride<D>;
  extern __shared__ __align__(16) unsigned char smem[];
  Bf16* q_tile = reinterpret_cast<Bf16*>(smem);
  Bf16* k_tiles = q_tile + kRows * S;  // two buffers: block j + 1 loads during block j
  Bf16* v_tiles = k_tiles + 2 * kKeys * S;

  const AttentionTile tile = tiles[blockIdx.x];
  const int first_head = int(blockIdx.y) << pack_shift;
  const size_t q_stride = size_t(heads) * D;
  const size_t kv_stride = size_t(heads / group) * D;
  const size_t q_col = size_t(first_head) * D;
  const size_t kv_col = size_t(first_head / group) * D;
  const int q0 = tile.q_begin;
  const int doc0 = tile.doc_begin;
  const int doc_end = tile.doc_end;
  // Causal: no key past the tile's last token.
  const int kv_end = min(q0 + (kRows >> pack_shift), doc_end);
  const int blocks = (kv_end - doc0 + kKeys - 1) / kKeys;

  load_tile<D, kRows>(q_tile, q, q0, pack_shift, doc_end, q_stride, q_col);
  load_tile<D, kKeys>(k_tiles, k, doc0, 0, kv_end, kv_stride, kv_col);
  load_tile<D, kKeys>(v_tiles, v, doc0, 0, kv_end, kv_stride, kv_col);
  gpu::cp_async_commit();

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  // The two tile rows this lane accumulates, as (token, head offset in the pack).
  const int pack_mask = (1 << pack_shift) - 1;
  const int row_lo = q0 + ((warp * 16 + g) >> pack_shift);
  const int row_hi = q0 + ((warp * 16 + g + 8) >> pack_shift);
  const int head_lo = (warp * 16 + g) & pack_mask;
  const int head_hi = (warp * 16 + g + 8) & pack_mask;

  // Up to head_dim 128 the query fragments stay in registers for the whole key stream; at
  // 256 they and the accumulator would not fit, so each block reloads them from the tile.
  constexpr bool kQInRegisters = D <= 128;
  uint32_t q_frag[kQInRegisters ? D / 16 : 1][4];
  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  float max_lo = -INFINITY, max_hi = -INFINITY;  // running maxima, in log2 units
  float sum_lo = 0.0f, sum_hi = 0.0f;            // this lane's part of the softmax sums

  for (int j = 0; j < blocks; ++j) {
    const int buffer = j & 1;
    if (j + 1 < blocks) {
      const int next = doc0 + (j + 1) * kKeys;
      load_tile<D, kKeys>(k_tiles + (buffer ^ 1) * kKeys * S, k, next, 0, kv_end, kv_stride,
                          kv_col);
      load_tile<D, kKeys>(v_tiles + (buffer ^ 1) * kKeys * S, v, next, 0, kv_end, kv_stride,
                          kv_col);
    }
    gpu::cp_async_commit();   // possibly empty: keeps the group count uniform
    gpu::cp_async_wait<1>();  // everything but the newest group: q and block j have landed
    __syncthreads();

    const Bf16* qw = q_tile + warp * 16 * S;
    if constexpr (kQInRegisters) {
      if (j == 0) {
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          q_frag[kk][0] = load_pair(qw + g * S + kk * 16 + 2 * t);
          q_frag[kk][1] = load_pair(qw + (g + 8) * S + kk * 16 + 2 * t);
          q_frag[kk][2] = load_pair(qw + g * S + kk * 16 + 8 + 2 * t);
          q_frag[kk][3] = load_pair(qw + (g + 8) * S + kk * 16 + 8 + 2 * t);
        }
      }
    }
    const Bf16* kt = k_tiles + buffer * kKeys * S;
    const Bf16* vt = v_tiles + buffer * kKeys * S;

    // Scores of 16 rows x 64 keys: 8 accumulator tiles of 8 keys. Each step over 16 dims
    // loads the K fragments of all 8 tiles first, then issues 8 independent products, so
    // neither the loads' nor the products' latency is paid one at a time. Matrices of one
    // load: (tile 2 np | 2 np + 1) x (dims lo | hi).
    float s[kKeys / 8][4];
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
    const Bf16* k_lane = kt + ((lane >> 4) * 8 + (lane & 7)) * S + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t kb[kKeys / 16][4];
#pragma unroll
      for (int np = 0; np < kKeys / 16; ++np)
        gpu::ldmatrix_x4(kb[np], k_lane + np * 16 * S + kk * 16);
      uint32_t q_reload[4];
      const uint32_t* qa = q_reload;
      if constexpr (kQInRegisters) {
        qa = q_frag[kk];
      } else {
        q_reload[0] = load_pair(qw + g * S + kk * 16 + 2 * t);
        q_reload[1] = load_pair(qw + (g + 8) * S + kk * 16 + 2 * t);
        q_reload[2] = load_pair(qw + g * S + kk * 16 + 8 + 2 * t);
        q_reload[3] = load_pair(qw + (g + 8) * S + kk * 16 + 8 + 2 * t);
      }
#pragma unroll
      for (int np = 0; np < kKeys / 16; ++np) {
        gpu::mma_bf16_16816(s[2 * np], qa, kb[np][0], kb[np][1]);
        gpu::mma_bf16_16816(s[2 * np + 1], qa, kb[np][2], kb[np][3]);
      }
    }

    // Only blocks reaching the tile's first token hold keys some row must not see: mask
    // keys after the row's token, and keys past the tile (zero-filled).
    const int key0 = doc0 + j * kKeys;
    if (key0 + kKeys > q0) {
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + n * 8 + 2 * t + (e & 1);
          const int row = e < 2 ? row_lo : row_hi;
          if (key > row || key >= kv_end) s[n][e] = -INFINITY;
        }
    }

    float block_lo = max_lo, block_hi = max_hi;
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
      block_lo = fmaxf(block_lo, fmaxf(s[n][0], s[n][1]) * scale_log2);
      block_hi = fmaxf(block_hi, fmaxf(s[n][2], s[n][3]) * scale_log2);
    }
    // The four lanes of a row hold its 64 keys between them.
    block_lo = fmaxf(block_lo, __shfl_xor_sync(0xFFFFFFFFu, block_lo, 1));
    block_lo = fmaxf(block_lo, __shfl_xor_sync(0xFFFFFFFFu, block_lo, 2));
    block_hi = fmaxf(block_hi, __shfl_xor_sync(0xFFFFFFFFu, block_hi, 1));
    block_hi = fmaxf(block_hi, __shfl_xor_sync(0xFFFFFFFFu, block_hi, 2));
    // A row with no visible key yet (only rows past the document's end) keeps a finite base.
    const float base_lo = block_lo == -INFINITY ? 0.0f : block_lo;
    const float base_hi = block_hi == -INFINITY ? 0.0f : block_hi;
    const float rescale_lo = exp2f(max_lo - base_lo);
    const float rescale_hi = exp2f(max_hi - base_hi);
    max_lo = block_lo;
    max_hi = block_hi;
    sum_lo *= rescale_lo;
    sum_hi *= rescale_hi;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      acc[n][0] *= rescale_lo;
      acc[n][1] *= rescale_lo;
      acc[n][2] *= rescale_hi;
      acc[n][3] *= rescale_hi;
    }

    uint32_t p_frag[kKeys / 16][4];
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
      const float p0 = exp2f(s[n][0] * scale_log2 - base_lo);
      const float p1 = exp2f(s[n][1] * scale_log2 - base_lo);
      const float p2 = exp2f(s[n][2] * scale_log2 - base_hi);
      const float p3 = exp2f(s[n][3] * scale_log2 - base_hi);
      sum_lo += p0 + p1;
      sum_hi += p2 + p3;
      p_frag[n / 2][(n % 2) * 2 + 0] = gpu::pack_bf16(p0, p1);
      p_frag[n / 2][(n % 2) * 2 + 1] = gpu::pack_bf16(p2, p3);
    }

    // acc += P V, V read as transposed 8x8 pieces: matrices (keys 0-7 | 8-15) x (dims
    // d..d+7 | d+8..d+15), lane 8 m + r addressing row r of matrix m.
    const int key_in = ((lane >> 3) & 1) * 8 + (lane & 7);
    const int dim_in = (lane >> 4) * 8;
    // Loads of a group of dims first, as for the scores (all of them up to head_dim 128).
    constexpr int kVGroup = D <= 128 ? D / 16 : 4;
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
#pragma unroll
      for (int d0 = 0; d0 < D / 16; d0 += kVGroup) {
        uint32_t vb[kVGroup][4];
#pragma unroll
        for (int dp = 0; dp < kVGroup; ++dp)
          gpu::ldmatrix_x4_trans(vb[dp], vt + (kk * 16 + key_in) * S + (d0 + dp) * 16 + dim_in);
#pragma unroll
        for (int dp = 0; dp < kVGroup; ++dp) {
          gpu::mma_bf16_16816(acc[2 * (d0 + dp)], p_frag[kk], vb[dp][0], vb[dp][1]);
          gpu::mma_bf16_16816(acc[2 * (d0 + dp) + 1], p_frag[kk], vb[dp][2], vb[dp][3]);
        }
      }
    }
    __syncthreads();  // block j's buffer is refilled by the next iteration
  }

  sum_lo += __shfl_xor_sync(0xFFFFFFFFu, sum_lo, 1);
  sum_lo += __shfl_xor_sync(0xFFFFFFFFu, sum_lo, 2);
  sum_hi += __shfl_xor_sync(0xFFFFFFFFu, sum_hi, 1);
  sum_hi += __shfl_xor_sync(0xFFFFFFFFu, sum_hi, 2);
  const float inv_lo = 1.0f / sum_lo;
  const float inv_hi = 1.0f / sum_hi;
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    const size_t col = q_col + n * 8 + 2 * t;
    if (row_lo < doc_end)
      *reinterpret_cast<uint32_t*>(out + size_t(row_lo) * q_stride + size_t(head_lo) * D + col) =
          gpu::pack_bf16(acc[n][0] * inv_lo, acc[n][1] * inv_lo);
    if (row_hi < doc_end)
      *reinterpret_cast<uint32_t*>(out + size_t(row_hi) * q_stride + size_t(head_hi) * D + col) =
          gpu::pack_bf16(acc[n][2] * inv_hi, acc[n][3] * inv_hi);
  }
}

template <int D, int kKeys>
cudaError_t launch(const Bf16* q, const Bf16* k, const Bf16* v, const AttentionTile* tiles,
                   uint32_t tile_count, uint32_t heads, uint32_t kv_heads, int pack_shift,
                   Bf16* out, cudaStream_t stream) {
  constexpr size_t bytes = smem_bytes<D, kKeys>();
  // Above the 48 KiB default: opt in (per device and cheap, so on every launch).
  if (cudaError_t err = cudaFuncSetAttribute(
          attention_kernel<D, kKeys>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
      err != cudaSuccess)
    return err;
  const float scale_log2 = float(1.4426950408889634 / std::sqrt(double(D)));
  attention_kernel<D, kKeys><<<dim3(tile_count, heads >> pack_shift), kThreads, bytes, stream>>>(
      q, k, v, tiles, int(heads), int(heads / kv_heads), pack_shift, scale_log2, out);
  return cudaGetLastError();
}

}  // namespace

uint32_t max_attention_pack(uint32_t heads, uint32_t kv_heads) {
  if (kv_heads == 0 || heads % kv_heads != 0) return 1;
  const uint32_t group = heads / kv_heads;
  uint32_t pack = 1;
  while (pack < kMaxAttentionPack && group % (2 * pack) == 0) pack *= 2;
  return pack;
}

std::vector<AttentionTile> attention_tiles(const int32_t* doc_offsets, size_t count,
                                           uint32_t pack) {
  const auto tokens = int32_t(kAttentionTileRows / pack);
  std::vector<AttentionTile> tiles;
  for (size_t d = 0; d + 1 < count; ++d)
    for (int32_t q0 = doc_offsets[d]; q0 < doc_offsets[d + 1]; q0 += tokens)
      tiles.push_back({q0, doc_offsets[d], doc_offsets[d + 1], 0});
  // Work of a tile: the key blocks before its last token.
  std::stable_sort(tiles.begin(), tiles.end(), [](const AttentionTile& a, const AttentionTile& b) {
    return a.q_begin - a.doc_begin > b.q_begin - b.doc_begin;
  });
  return tiles;
}

bool attention_supports(uint32_t head_dim) {
  return head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256;
}

bool attention_kernel_runs(AttentionKernel kernel, uint32_t head_dim) {
  if (!attention_supports(head_dim)) return false;
  return kernel != AttentionKernel::kWgmma || attention_wgmma_available(head_dim);
}

cudaError_t launch_attention(const Bf16* q, const Bf16* k, const Bf16* v,
                             const AttentionTile* tiles, uint32_t tile_count, uint32_t heads,
                             uint32_t kv_heads, uint32_t head_dim, uint32_t pack, Bf16* out,
                             cudaStream_t stream, AttentionKernel kernel) {
  if (tile_count == 0) return cudaSuccess;
  if (kv_heads == 0 || heads % kv_heads != 0 || heads > 65535) return cudaErrorInvalidValue;
  int shift = 0;
  while ((1u << shift) < pack) ++shift;
  if ((1u << shift) != pack || pack > kMaxAttentionPack || (heads / kv_heads) % pack != 0)
    return cudaErrorInvalidValue;
  if (kernel == AttentionKernel::kBest)
    kernel =
        attention_wgmma_available(head_dim) ? AttentionKernel::kWgmma : AttentionKernel::kMmaSync32;
  if (kernel == AttentionKernel::kWgmma) {
    if (!attention_wgmma_available(head_dim)) return cudaErrorNotSupported;
    return launch_attention_wgmma(q, k, v, tiles, tile_count, heads, kv_heads, head_dim, shift, out,
                                  stream);
  }
  const uint32_t key_block = kernel == AttentionKernel::kMmaSync64 ? 64 : 32;
  // One instantiation per (head size, key block).
#define HSRING_ATTENTION_CASE(D, KEYS)    \
  if (head_dim == D && key_block == KEYS) \
    return launch<D, KEYS>(q, k, v, tiles, tile_count, heads, kv_heads, shift, out, stream);
  HSRING_ATTENTION_CASE(32, 64)
  HSRING_ATTENTION_CASE(64, 64)
  HSRING_ATTENTION_CASE(128, 64)
  HSRING_ATTENTION_CASE(32, 32)
  HSRING_ATTENTION_CASE(64, 32)
  HSRING_ATTENTION_CASE(128, 32)
  HSRING_ATTENTION_CASE(256, 64)
  HSRING_ATTENTION_CASE(256, 32)
#undef HSRING_ATTENTION_CASE
  return cudaErrorInvalidValue;
}

}  // namespace hsring
