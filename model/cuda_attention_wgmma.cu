// The target's causal attention (model/cuda_kernels.h, launch_attention) on Hopper's
// warpgroup products (gpu/wgmma.cuh), for head_dim 128 and 256. Built for sm_90a only;
// launch_attention takes it where the GPU runs it and the mma.sync kernel
// (model/cuda_attention.cu) elsewhere. Tiles, packing and outputs are that kernel's: one CTA
// of one warpgroup per (tile, group of packed query heads), 64 query rows.
//
// Each mma.sync product fed one warp's 16 rows from fragments the warp loaded itself; here
// one instruction feeds the 64 rows straight from shared memory. S = Q K^T reads Q and a key
// tile K-major; O += P V takes the scores, rounded to bf16, as register A fragments and reads
// the value tile MN-major (at head_dim 256 as two products of 128 columns).
//
// K and V have one buffer each, and each is refilled as soon as its product is done: K(j+1)
// loads during block j's softmax and P V, V(j+1) during block j+1's scores and softmax. With
// no second buffer the shared memory is 3 tiles (48 KB at head_dim 128, 96 KB at 256), so
// three or two CTAs share an SM and hide each other's waits.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "gpu/bf16.cuh"
#include "gpu/cp_async.cuh"
#include "gpu/online_softmax.cuh"
#include "gpu/wgmma.cuh"
#include "model/cuda_attention_wgmma.h"

namespace hsring {

namespace {

namespace wgmma = gpu::wgmma;

constexpr int kRows = int(kAttentionTileRows);  // query rows of a tile, and keys per block
constexpr int kThreads = 128;                   // one warpgroup
static_assert(kRows == wgmma::kTileRows, "a tile of query rows is one wgmma tile");

template <int D>
constexpr uint32_t kTile = wgmma::tile_bytes(D);
// q, k, v, and room to align them on the swizzle's 1024 bytes.
template <int D>
constexpr size_t kSmemBytes = wgmma::kAlignment + 3 * size_t(kTile<D>);
// O's accumulators of a 128-column product: 64 a thread.
constexpr int kSliceColumns = 128;
template <int D>
constexpr int kSlices = D / kSliceColumns;

struct Problem {
  const Bf16 *q, *k, *v;
  const AttentionTile* tiles;
  Bf16* out;
  int heads, group, pack_shift;
  float scale_log2;
};

// Starts copying rows [0, 64) of a tile: row r from row_of(r) (null: zeros), all D columns,
// D / 8 consecutive threads a row, 16 bytes each, so that each warp reads whole rows.
template <int D, class RowOf>
__device__ __forceinline__ void load_tile(unsigned char* tile, RowOf row_of, const Bf16* any) {
  constexpr int kChunks = D / 8;  // 16-byte pieces per row
  static_assert(kRows * kChunks % kThreads == 0, "every thread copies the same count");
#pragma unroll
  for (int i = 0; i < kRows * kChunks / kThreads; ++i) {
    const int c = i * kThreads + int(threadIdx.x);
    const int row = c / kChunks, chunk = c % kChunks;
    const Bf16* src = row_of(row);
    gpu::cp_async16(tile + wgmma::offset_of(row, chunk), src ? src + chunk * 8 : any,
                    src != nullptr);
  }
}

// Makes the copies this thread waited for visible to the products, then to every thread.
__device__ __forceinline__ void publish_tile() {
  wgmma::fence_shared_writes();
  __syncthreads();
}

// Thread t holds rows 16 (t / 32) + (t % 32) / 4 (+ 8) of every accumulator and, of each
// 8-column piece j, columns 8 j + 2 (t % 4) (+ 1): s[4 j + 2 r + c] is row gid + 8 r,
// column 8 j + 2 tig + c.
template <int D>
__global__ void __launch_bounds__(kThreads, D == 128 ? 3 : 2) attention_wgmma_kernel(Problem p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* q_tile =
      smem_raw +
      (wgmma::kAlignment - gpu::smem_address(smem_raw) % wgmma::kAlignment) % wgmma::kAlignment;
  unsigned char* k_tile = q_tile + kTile<D>;
  unsigned char* v_tile = k_tile + kTile<D>;

  const AttentionTile tile = p.tiles[blockIdx.x];
  const int first_head = int(blockIdx.y) << p.pack_shift;
  const size_t q_stride = size_t(p.heads) * D;
  const size_t kv_stride = size_t(p.heads / p.group) * D;
  const size_t kv_col = size_t(first_head / p.group) * D;
  const int q0 = tile.q_begin, doc0 = tile.doc_begin, doc_end = tile.doc_end;
  // Causal: no key past the tile's last token.
  const int kv_end = min(q0 + (kRows >> p.pack_shift), doc_end);
  const int blocks = (kv_end - doc0 + kRows - 1) / kRows;
  const int pack_mask = (1 << p.pack_shift) - 1;

  // Row r of the tile: token q0 + (r >> shift), query head first_head + (r & mask).
  load_tile<D>(
      q_tile,
      [&](int r) -> const Bf16* {
        const int token = q0 + (r >> p.pack_shift);
        return token < doc_end
                   ? p.q + size_t(token) * q_stride + size_t(first_head + (r & pack_mask)) * D
                   : nullptr;
      },
      p.q);
  // Row r of a key block from key0 on, in K or V (base): null past the document.
  const auto kv_rows = [&](const Bf16* base, int key0) {
    return [=](int r) -> const Bf16* {
      const int key = key0 + r;
      return key < kv_end ? base + size_t(key) * kv_stride + kv_col : nullptr;
    };
  };
  gpu::cp_async_commit();  // group: q
  load_tile<D>(k_tile, kv_rows(p.k, doc0), p.k);
  gpu::cp_async_commit();  // group: k of block 0
  load_tile<D>(v_tile, kv_rows(p.v, doc0), p.v);
  gpu::cp_async_commit();  // group: v of block 0

  const int warp = int(threadIdx.x) / 32, gid = int(threadIdx.x) % 32 / 4,
            tig = int(threadIdx.x) % 4;
  const int row_token[2] = {q0 + ((warp * 16 + gid) >> p.pack_shift),
                            q0 + ((warp * 16 + gid + 8) >> p.pack_shift)};
  const uint32_t q_address = gpu::smem_address(q_tile);
  const uint32_t k_address = gpu::smem_address(k_tile);
  const uint32_t v_address = gpu::smem_address(v_tile);

  float o[kSlices<D>][64] = {};
  float m[2] = {-INFINITY, -INFINITY};  // running maxima of rows gid, gid + 8 (log2 units)
  float l[2] = {0.0f, 0.0f};            // this thread's part of their sums

  for (int j = 0; j < blocks; ++j) {
    const int key0 = doc0 + j * kRows;
    // Every group but the newest (v of block j) has landed: q and k of block j.
    gpu::cp_async_wait<1>();
    publish_tile();

    float s[32];
    wgmma::fence();
    wgmma::mma_64x64_tiles<D>(s, q_address, k_address);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::pin(s);
    __syncthreads();  // every warp's products are done with k: refill it
    if (j + 1 < blocks) load_tile<D>(k_tile, kv_rows(p.k, key0 + kRows), p.k);
    gpu::cp_async_commit();  // group: k of block j + 1 (possibly empty)

    // Scaled scores in log2 units. Only blocks reaching the tile's first token hold keys a
    // row must not see: keys after the row's token, and keys past the tile (zero-filled).
    const bool masked = key0 + kRows > q0;
    float block_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int e = 0; e < 32; ++e) {
      const int r = (e / 2) & 1;
      const int key = key0 + (e / 4) * 8 + tig * 2 + (e & 1);
      s[e] = masked && (key > row_token[r] || key >= kv_end) ? -INFINITY : s[e] * p.scale_log2;
      block_max[r] = fmaxf(block_max[r], s[e]);
    }
    // Every row sees its document's first key in block 0, so its maximum is finite from
    // there on and a fully masked block rescales by 1.
    float rescale[2];
    gpu::online_softmax_step(block_max, m, l, rescale);
#pragma unroll
    for (int e = 0; e < 32; ++e) {
      s[e] = exp2f(s[e] - m[(e / 2) & 1]);
      l[(e / 2) & 1] += s[e];
    }
#pragma unroll
    for (int slice = 0; slice < kSlices<D>; ++slice)
#pragma unroll
      for (int e = 0; e < 64; ++e) o[slice][e] *= rescale[(e / 2) & 1];

    uint32_t frag[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma::a_fragment(frag[kk], s, kk);
    // The newest group (k of block j + 1) may still be loading: v of block j has landed.
    gpu::cp_async_wait<1>();
    publish_tile();
#pragma unroll
    for (int slice = 0; slice < kSlices<D>; ++slice) wgmma::pin(o[slice]);
    wgmma::fence();
#pragma unroll
    for (int slice = 0; slice < kSlices<D>; ++slice)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma::mma_64x128_rs(o[slice], frag[kk],
                             wgmma::mn_major(v_address + slice * 2 * wgmma::kPanelBytes, kk));
    wgmma::commit();
    wgmma::wait<0>();
#pragma unroll
    for (int slice = 0; slice < kSlices<D>; ++slice) wgmma::pin(o[slice]);
    __syncthreads();  // every warp's products are done with v: refill it
    if (j + 1 < blocks) load_tile<D>(v_tile, kv_rows(p.v, key0 + kRows), p.v);
    gpu::cp_async_commit();  // group: v of block j + 1 (possibly empty)
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xFFFFFFFFu, l[r], 1);
    l[r] += __shfl_xor_sync(0xFFFFFFFFu, l[r], 2);
    const int token = row_token[r];
    if (token >= doc_end) continue;
    const float inv = 1.0f / l[r];
    Bf16* dst = p.out + size_t(token) * q_stride +
                size_t(first_head + ((warp * 16 + gid + 8 * r) & pack_mask)) * D;
#pragma unroll
    for (int slice = 0; slice < kSlices<D>; ++slice)
#pragma unroll
      for (int j = 0; j < kSliceColumns / 8; ++j)
        *reinterpret_cast<uint32_t*>(dst + slice * kSliceColumns + j * 8 + tig * 2) =
            gpu::pack_bf16(o[slice][4 * j + 2 * r] * inv, o[slice][4 * j + 2 * r + 1] * inv);
  }
}

template <int D>
cudaError_t launch(const Problem& p, uint32_t tile_count, cudaStream_t stream) {
  // Above the 48 KiB default: opt in (per device and cheap, so on every launch).
  if (cudaError_t err =
          cudaFuncSetAttribute(attention_wgmma_kernel<D>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes<D>));
      err != cudaSuccess)
    return err;
  attention_wgmma_kernel<D>
      <<<dim3(tile_count, uint32_t(p.heads) >> p.pack_shift), kThreads, kSmemBytes<D>, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

bool attention_wgmma_available(uint32_t head_dim) {
  if (head_dim != 128 && head_dim != 256) return false;
  // The kernels have sm_90a images only: elsewhere there is nothing to launch. Asked once
  // (one process drives one GPU).
  static const bool available = [] {
    cudaFuncAttributes attributes{};
    const bool ok = cudaFuncGetAttributes(&attributes, attention_wgmma_kernel<128>) == cudaSuccess;
    if (!ok) (void)cudaGetLastError();  // not an error: the caller takes the mma.sync kernel
    return ok;
  }();
  return available;
}

cudaError_t launch_attention_wgmma(const Bf16* q, const Bf16* k, const Bf16* v,
                                   const AttentionTile* tiles, uint32_t tile_count, uint32_t heads,
                                   uint32_t kv_heads, uint32_t head_dim, int pack_shift, Bf16* out,
                                   cudaStream_t stream) {
  const Problem p{q,
                  k,
                  v,
                  tiles,
                  out,
                  int(heads),
                  int(heads / kv_heads),
                  pack_shift,
                  float(1.4426950408889634 / std::sqrt(double(head_dim)))};
  if (head_dim == 128) return launch<128>(p, tile_count, stream);
  if (head_dim == 256) return launch<256>(p, tile_count, stream);
  return cudaErrorInvalidValue;
}

}  // namespace hsring
