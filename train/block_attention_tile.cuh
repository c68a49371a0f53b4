// Indexing and launching shared by the DFlash block-attention kernels (fp32 in
// cuda_block_attention.cu, bf16 tensor-core in cuda_block_attention_bf16.cu and
// cuda_block_attention_wgmma.cu): the kernels' 32-bit copy of the shape, which query vector a
// row is, which queries and keys one CTA of a query-side kernel works on, and the launches.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "train/block_attention_shape.h"

namespace hsring::train {

// BlockAttentionShape as the kernels index it: counts in 32 bits.
struct BlockAttentionDims {
  uint32_t blocks = 0;        // NB
  uint32_t block_size = 0;    // B
  uint32_t context_rows = 0;  // rows of ctx_k / ctx_v
  uint32_t heads = 0, kv_heads = 0, head_dim = 0;
};

// False when a count of the shape does not fit 32 bits (the launches then refuse it).
inline bool to_dims(const BlockAttentionShape& s, BlockAttentionDims& d) {
  constexpr size_t kMax = UINT32_MAX;
  if (s.blocks > kMax || s.block_size > kMax || s.context_rows > kMax || s.heads > kMax ||
      s.kv_heads > kMax || s.head_dim > kMax)
    return false;
  d = {uint32_t(s.blocks), uint32_t(s.block_size), uint32_t(s.context_rows),
       uint32_t(s.heads),  uint32_t(s.kv_heads),   uint32_t(s.head_dim)};
  return true;
}

// Query vector v of block b for KV head g: block row v / group, query head g * group + v %
// group. Its index in [rows, heads] (lse, delta); times head_dim, its offset in q.
__device__ inline uint64_t query_index(const BlockAttentionDims& d, uint32_t b, uint32_t g,
                                       uint32_t v) {
  const uint32_t group = d.heads / d.kv_heads;
  const uint64_t row = uint64_t(b) * d.block_size + v / group;
  return row * d.heads + g * group + v % group;
}

// One CTA of a query-side kernel: block b (order[grid x], or grid x when order is null) and
// KV head g (grid y), query vectors [v0, v0 + rows) of the nv = B * group that share g
// (grid z); its keys are block b's context rows [cb, cb + n_ctx) (context[2b],
// context[2b + 1]), then its own B rows.
struct QueryTile {
  uint32_t b, g, nv, v0;
  int32_t cb, n_ctx, n_keys;
};

__device__ inline QueryTile query_tile(const BlockAttentionDims& d, const int32_t* context,
                                       uint32_t rows, const int32_t* order = nullptr) {
  QueryTile t;
  t.b = order ? uint32_t(order[blockIdx.x]) : blockIdx.x;
  t.g = blockIdx.y;
  t.nv = d.block_size * (d.heads / d.kv_heads);
  t.v0 = blockIdx.z * rows;
  t.cb = context[2 * t.b];
  t.n_ctx = context[2 * t.b + 1] - t.cb;
  t.n_keys = t.n_ctx + int32_t(d.block_size);
  return t;
}

// The query-side grid that query_tile reads: blocks (x), KV heads (y), chunks of `rows` of
// a block's B * group query vectors (z).
inline dim3 query_grid(const BlockAttentionDims& d, uint32_t rows) {
  const uint32_t nv = d.block_size * (d.heads / d.kv_heads);
  return dim3(d.blocks, d.kv_heads, (nv + rows - 1) / rows);
}

// kernel<<<grid, threads, smem, stream>>>(args), the kernel's dynamic shared memory limit
// raised to smem first (the default stops at 48 KB); an empty grid launches nothing.
template <class Kernel, class KernelArgs>
cudaError_t launch_kernel(Kernel kernel, dim3 grid, int threads, size_t smem,
                          const KernelArgs& args, cudaStream_t stream) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return cudaSuccess;
  if (cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
      e != cudaSuccess)
    return e;
  kernel<<<grid, threads, smem, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace hsring::train
