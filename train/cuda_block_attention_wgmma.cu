// The key side of the bf16 block attention's backward (dk, dv) on Hopper's warpgroup
// products (train/wgmma.cuh), for head_dim 128. Built for sm_90a only; the launcher in
// train/cuda_block_attention_bf16.cu takes it where the GPU runs it and the mma.sync kernel
// elsewhere. The work items, their partial slots and every output are the mma.sync
// kernel's: only the products change.
//
// One warpgroup (four warps) per CTA owns 64 keys; query tiles of 64 stream through shared
// memory, double buffered. Per tile: S^T = K Q^T and dP^T = V dO^T, both operands from
// shared memory (K-major); P^T and dS^T are formed in the accumulators' registers; then
// dV += P^T dO and dK += dS^T Q take P^T and dS^T as register A fragments and dO and Q
// from the same tiles read MN-major. Each product of the mma.sync kernel fed one warp's
// 16 keys from fragments that warp loaded itself; here one instruction feeds 64 keys
// from shared memory, which is what let the tensor cores outrun that kernel's loads.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "train/block_attention_bf16_device.cuh"
#include "train/block_attention_wgmma.cuh"
#include "train/wgmma.cuh"

namespace hsring::train::cuda::attention_bf16 {

namespace {

constexpr int kHd = wgmma::kColumns;  // 128
constexpr int kQueryTile = 64;        // query vectors per tile: the S^T product's N
constexpr int kThreads = 128;         // one warpgroup
constexpr uint32_t kTile = wgmma::kTileBytes;
static_assert(kRows == wgmma::kTileRows && kQueryTile == wgmma::kTileRows &&
                  kThreads == 8 * (kHd / 8),
              "a thread's loads: a fixed row in each group of 8, a fixed chunk");

// 4 bytes global -> shared (through L1: .cg takes 16 only); zero-filled when !valid.
__device__ void cp_async4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(valid ? 4 : 0));
}

// The wgmma A fragment of columns [16 kk, 16 kk + 16) of a 64 x 64 accumulator.
__device__ void fragment(uint32_t (&a)[4], const float (&acc)[32], int kk) {
  a[0] = pack_bf16(acc[8 * kk], acc[8 * kk + 1]);
  a[1] = pack_bf16(acc[8 * kk + 2], acc[8 * kk + 3]);
  a[2] = pack_bf16(acc[8 * kk + 4], acc[8 * kk + 5]);
  a[3] = pack_bf16(acc[8 * kk + 6], acc[8 * kk + 7]);
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

__global__ void __launch_bounds__(kThreads, 2) backward_key_wgmma_kernel(Args a) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // The tiles on the swizzle's 1024 bytes, whatever the window's start (kKeySmem has room).
  unsigned char* base =
      smem_raw +
      ((wgmma::kAlignment - smem_address(smem_raw) % wgmma::kAlignment) % wgmma::kAlignment);
  unsigned char* ks = base;
  unsigned char* vs = ks + kTile;
  unsigned char* qs = vs + kTile;                            // [2] tiles
  unsigned char* dos = qs + 2 * kTile;                       // [2] tiles
  float* lse_s = reinterpret_cast<float*>(dos + 2 * kTile);  // [2][64]
  float* delta_s = lse_s + 2 * kQueryTile;                   // [2][64]
  const BlockAttentionDims& d = a.d;
  const BlockKeyWork w = a.work[blockIdx.x];
  const uint32_t g = blockIdx.y, nv = d.block_size * (d.heads / d.kv_heads);
  const int t = int(threadIdx.x), lane = t % 32, warp = t / 32, gid = lane / 4, tig = lane % 4;
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
    const int chunk = t / 8;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int row = 8 * i + t % 8;
      const uint32_t v = v0 + uint32_t(row);
      const bool valid = v < nv;
      const uint64_t at = valid ? uint64_t(index_of(uint32_t(blk), v)) * kHd + chunk * 8 : 0;
      const uint32_t offset = wgmma::offset_of(row, chunk);
      cp_async16(qs + buf * kTile + offset, a.t.q + at, valid);
      cp_async16(dos + buf * kTile + offset, a.t.dout + at, valid);
    }
    // lse and delta asynchronously too: a plain load here would hold the whole warpgroup
    // (its products are collective) for a global round trip every tile.
    if (t < kQueryTile) {
      const uint32_t v = v0 + uint32_t(t);
      const uint64_t index = v < nv ? index_of(uint32_t(blk), v) : 0;
      cp_async4(lse_s + buf * kQueryTile + t, a.lse + index, v < nv);
      cp_async4(delta_s + buf * kQueryTile + t, a.delta + index, v < nv);
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
    cp_async_wait_all();
    wgmma::fence_shared_writes();
    __syncthreads();  // this tile is in; the last tile's products are done with the other
    if (next_blk < w.end_block) load_queries(buf ^ 1, next_blk, next_v0);
    cp_async_commit();
    const uint32_t q_tile = smem_address(qs + buf * kTile);
    const uint32_t o_tile = smem_address(dos + buf * kTile);
    const float* lse_t = lse_s + buf * kQueryTile;
    const float* delta_t = delta_s + buf * kQueryTile;
    bool visible[2];
    {
      const int32_t cb = a.context[2 * blk], ce = a.context[2 * blk + 1];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int32_t key = warp * 16 + gid + 8 * r, row = w.first_key + key;
        visible[r] = key < w.keys && (!context_tile || (cb <= row && row < ce));
      }
    }

    // S^T = K Q^T, then dP^T = V dO^T, as two groups: P^T is formed while dP^T runs.
    float s[32], dp[32];
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kHd / 16; ++kk)
      wgmma::mma_64x64_ss(s, wgmma::k_major(k_tile, kk), wgmma::k_major(q_tile, kk), kk > 0);
    wgmma::commit();
#pragma unroll
    for (int kk = 0; kk < kHd / 16; ++kk)
      wgmma::mma_64x64_ss(dp, wgmma::k_major(v_tile, kk), wgmma::k_major(o_tile, kk), kk > 0);
    wgmma::commit();
    wgmma::wait<1>();
    wgmma::pin(s);
    // P^T; invisible keys and padding queries give zeros.
#pragma unroll
    for (int e = 0; e < 32; ++e) {
      const int qv = (e / 4) * 8 + tig * 2 + (e & 1);
      const bool valid = visible[(e / 2) & 1] && v0 + uint32_t(qv) < nv;
      s[e] = valid ? exp2f(fmaf(s[e], scale_log2, -lse_t[qv] * kLog2e)) : 0.0f;
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
      fragment(pa[kk], s, kk);
      fragment(dsa[kk], dp, kk);
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
  cp_async_wait_all();  // nothing may land in shared memory after the CTA ends

  const float scale = rsqrtf(float(kHd));
  float* dk_base;
  float* dv_base;
  uint64_t row_stride;
  if (w.slot < 0) {
    const uint64_t first = (uint64_t(w.first_key) * d.kv_heads + g) * kHd;
    dk_base = (context_tile ? a.d_ctx_k : a.d_block_k) + first;
    dv_base = (context_tile ? a.d_ctx_v : a.d_block_v) + first;
    row_stride = uint64_t(d.kv_heads) * kHd;
  } else {
    // Partial slot layout: [slot][dk, dv][kv head][64 keys][kHd].
    dk_base = a.partial + ((uint64_t(w.slot) * 2 * d.kv_heads + g) * kRows) * kHd;
    dv_base = dk_base + uint64_t(d.kv_heads) * kRows * kHd;
    row_stride = kHd;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = warp * 16 + gid + 8 * r;
    if (key >= w.keys) continue;
    float* dk_row = dk_base + uint64_t(key) * row_stride;
    float* dv_row = dv_base + uint64_t(key) * row_stride;
#pragma unroll
    for (int j = 0; j < kHd / 8; ++j) {
      *reinterpret_cast<float2*>(dk_row + j * 8 + tig * 2) =
          make_float2(dk[4 * j + 2 * r] * scale, dk[4 * j + 2 * r + 1] * scale);
      *reinterpret_cast<float2*>(dv_row + j * 8 + tig * 2) =
          make_float2(dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
    }
  }
}

constexpr size_t kKeySmem = wgmma::kAlignment + 6 * size_t(kTile) + 4 * kQueryTile * sizeof(float);

}  // namespace

bool wgmma_backward_key_available(uint32_t head_dim) {
  if (head_dim != uint32_t(kHd)) return false;
  // The kernel has an sm_90a image only: elsewhere there is nothing to launch. Asked once
  // (one process drives one GPU).
  static const bool available = [] {
    cudaFuncAttributes attributes{};
    const bool ok = cudaFuncGetAttributes(&attributes, backward_key_wgmma_kernel) == cudaSuccess;
    if (!ok) (void)cudaGetLastError();  // not an error: the caller takes the mma.sync kernel
    return ok;
  }();
  return available;
}

cudaError_t launch_backward_key_wgmma(const Args& a, uint32_t work_count, cudaStream_t stream) {
  if (work_count == 0 || a.d.kv_heads == 0) return cudaSuccess;
  if (cudaError_t e = cudaFuncSetAttribute(
          backward_key_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kKeySmem));
      e != cudaSuccess)
    return e;
  backward_key_wgmma_kernel<<<dim3(work_count, a.d.kv_heads, 1), kThreads, kKeySmem, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace hsring::train::cuda::attention_bf16
