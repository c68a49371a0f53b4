// The DFlash drafter's attention on the GPU (train/block_attention.h has the rule and the CPU
// reference): the B query rows of draft block b read the context keys of its document
// before its anchor, [context[2b], context[2b + 1]), and the B keys of their own block. One
// kernel, forward and backward, fp32 with an online softmax: a CTA holds up to 64 query
// vectors (a block's rows times the query heads of one KV head) and streams their keys in
// tiles of 32 through shared memory, so no [queries x keys] matrix exists anywhere. The
// backward writes dq per query CTA and dk, dv per key tile over the blocks that see it: no
// two CTAs write one element (no atomics; the same bits every run). Plain host functions
// (no CUDA syntax here), each launching on `stream` and returning the launch's error. The
// trainer's bf16 mode uses the tensor-core version instead (train/cuda_block_attention_bf16.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "train/block_attention_shape.h"

namespace hsring::train {

// A tile of at most 32 key rows for the key-side backward, and the blocks whose queries
// may see it: [first_block, end_block). kind 0: context rows [first_key, first_key + keys);
// kind 1: rows of block first_block's own keys.
struct BlockKeyTile {
  int32_t kind;
  int32_t first_key;
  int32_t keys;
  int32_t first_block;
  int32_t end_block;
};

// The key tiles of a batch from its context ranges (host, [blocks * 2]): every context row
// (those no block sees get zero gradients) and every block key row. Blocks in between that
// do not see a tile are skipped on the device; anchors in ascending order (as
// sample_anchors gives them) keep each tile's range to the blocks that do. Empty for a shape
// with a count past 32 bits, which the launches refuse.
std::vector<BlockKeyTile> block_key_tiles(const int32_t* context, const BlockAttentionShape& shape);

// True when the kernels take this head_dim: a multiple of 32 up to 256.
bool block_attention_supported(uint32_t head_dim);

// q [NB * B, heads * hd], ctx_k / ctx_v [context_rows, kv_heads * hd], block_k / block_v
// [NB * B, kv_heads * hd]; context [NB * 2] on the device. out like q, lse [NB * B, heads]
// (the scaled scores' log-sum-exp, for the backward).
cudaError_t launch_block_attention_forward(const float* q, const float* ctx_k, const float* ctx_v,
                                           const float* block_k, const float* block_v,
                                           const int32_t* context, const BlockAttentionShape& shape,
                                           float* out, float* lse, cudaStream_t stream);

// dq, d_ctx_k, d_ctx_v, d_block_k, d_block_v written (every element) from the forward's
// inputs, out, lse and dout; delta [NB * B, heads] is scratch. tiles: block_key_tiles of
// the same context, on the device.
cudaError_t launch_block_attention_backward(const float* q, const float* ctx_k, const float* ctx_v,
                                            const float* block_k, const float* block_v,
                                            const float* out, const float* dout, const float* lse,
                                            const int32_t* context, const BlockKeyTile* tiles,
                                            uint32_t tile_count, const BlockAttentionShape& shape,
                                            float* delta, float* dq, float* d_ctx_k, float* d_ctx_v,
                                            float* d_block_k, float* d_block_v,
                                            cudaStream_t stream);

}  // namespace hsring::train
