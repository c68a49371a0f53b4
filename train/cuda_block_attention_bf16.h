// The DFlash block attention (train/cuda_block_attention.h has the rule) on the bf16 tensor
// cores, for the trainer's bf16 mode: the inputs come in bf16, or fp32 ones are rounded to
// bf16 once per call into a workspace; the products run as mma.sync m16n8k16 with fp32
// accumulation, and the softmax statistics, lse, delta and every output stay fp32. Tiles are loaded
// with cp.async, double buffered. The key-side backward splits each key tile's range of blocks into
// chunks of work (so a tile at a long document's start does not serialise one SM); chunks write
// partial sums to the workspace and a second pass adds them in chunk order: no atomics, the
// same bits every run. Plain host functions (no CUDA syntax here), launching on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "train/cuda_block_attention.h"

namespace hsring::train {

// True when the tensor-core kernels take this head_dim (32, 64, 128, 256); use the fp32
// kernels otherwise.
bool block_attention_bf16_supported(uint32_t head_dim);

// One CTA's share of the key-side backward: up to 64 key rows (kind 0: context rows
// [first_key, first_key + keys); kind 1: block first_block's own key rows from first_key)
// against the queries of blocks [first_block, end_block). slot < 0: the sums are the
// gradients themselves; otherwise they go to partial slot `slot`.
struct BlockKeyWork {
  int32_t kind;
  int32_t first_key;
  int32_t keys;
  int32_t first_block;
  int32_t end_block;
  int32_t slot;
};

// A key tile split into `slots` chunks: its gradients are the sum of partial slots
// [first_slot, first_slot + slots), added in that order.
struct BlockKeySum {
  int32_t kind;
  int32_t first_key;
  int32_t keys;
  int32_t first_slot;
  int32_t slots;
};

struct BlockKeyPlan {
  std::vector<BlockKeyWork> work;
  std::vector<BlockKeySum> sums;
  size_t partial_slots = 0;
};

// On an H100 or H200 (sm_90) the kernels run on Hopper's warpgroup products (wgmma) at
// head_dim 128, elsewhere on mma.sync: the same outputs within fp32 rounding (the backward
// gives the same bits; the forward's online softmax steps over 64 keys, not 32). True when
// this call's GPU and head_dim take the wgmma kernels and they are enabled: by default,
// unless HSRING_BLOCK_ATTENTION_WGMMA=0 is set or set_block_attention_wgmma(false) was
// called (tests and benchmarks compare the two so).
bool block_attention_wgmma_active(uint32_t head_dim);
void set_block_attention_wgmma(bool enabled);

// The key-side work of a batch from its context ranges (host, [blocks * 2], anchors in
// ascending order): every context row (rows no block sees get zero gradients) and every
// block key row, each tile's blocks cut into chunks of at least 16. Empty for a shape with a
// count past 32 bits, which the launches refuse.
BlockKeyPlan block_key_plan(const int32_t* context, const BlockAttentionShape& shape);

// Bytes of device workspace the calls below need for this shape and a plan with
// `partial_slots` slots (0 for the forward).
size_t block_attention_bf16_workspace_bytes(const BlockAttentionShape& shape, size_t partial_slots);

// The inputs already in bf16 (each laid out as its fp32 array: q [rows, heads * head_dim],
// the keys and values [rows, kv_heads * head_dim]), as the trainer's kernels write them: the
// calls that take them skip the staging pass that rounds the fp32 ones into the workspace.
struct BlockAttentionBf16Inputs {
  const uint16_t *q, *ctx_k, *ctx_v, *block_k, *block_v;
};

// As launch_block_attention_forward; workspace: block_attention_bf16_workspace_bytes(shape,
// 0) bytes. Every array here and below 16-byte aligned (vector loads and stores).
cudaError_t launch_block_attention_forward_bf16(const float* q, const float* ctx_k,
                                                const float* ctx_v, const float* block_k,
                                                const float* block_v, const int32_t* context,
                                                const BlockAttentionShape& shape, void* workspace,
                                                float* out, float* lse, cudaStream_t stream);

// As launch_block_attention_backward, with the plan's work and sums on the device and a
// workspace of block_attention_bf16_workspace_bytes(shape, plan.partial_slots) bytes.
cudaError_t launch_block_attention_backward_bf16(
    const float* q, const float* ctx_k, const float* ctx_v, const float* block_k,
    const float* block_v, const float* out, const float* dout, const float* lse,
    const int32_t* context, const BlockKeyWork* work, uint32_t work_count, const BlockKeySum* sums,
    uint32_t sum_count, const BlockAttentionShape& shape, void* workspace, float* delta, float* dq,
    float* d_ctx_k, float* d_ctx_v, float* d_block_k, float* d_block_v, cudaStream_t stream);

// The blocks by descending context length (ties by index), from context as block_key_plan
// takes it. Given on the device as block_order below, the query-side kernels (the forward,
// dq) start their blocks' CTAs in this order: the longest first, so that the grid does not
// end waiting on a long block started last. The results are the same, bit for bit.
std::vector<int32_t> longest_context_first(const int32_t* context, uint32_t blocks);

// The same two from bf16 inputs: the fp32 calls' results, bit for bit, for inputs that are
// their fp32 ones rounded to nearest even. With out_bf16, the forward also writes out there
// rounded to nearest even (the output projection's operand); then `out` may be null, and
// the fp32 out is not written. The backward takes out in bf16, as the forward's out_bf16
// writes it, for delta = dout . out (the fp32-input backward rounds its fp32 out to bf16
// where delta reads it, so the two agree bit for bit). block_order: [blocks] from
// longest_context_first, or null (block order).
cudaError_t launch_block_attention_forward_bf16(const BlockAttentionBf16Inputs& in,
                                                const int32_t* context,
                                                const BlockAttentionShape& shape, void* workspace,
                                                float* out, float* lse, cudaStream_t stream,
                                                uint16_t* out_bf16 = nullptr,
                                                const int32_t* block_order = nullptr);
cudaError_t launch_block_attention_backward_bf16(
    const BlockAttentionBf16Inputs& in, const uint16_t* out, const float* dout, const float* lse,
    const int32_t* context, const BlockKeyWork* work, uint32_t work_count, const BlockKeySum* sums,
    uint32_t sum_count, const BlockAttentionShape& shape, void* workspace, float* delta, float* dq,
    float* d_ctx_k, float* d_ctx_v, float* d_block_k, float* d_block_v, cudaStream_t stream,
    const int32_t* block_order = nullptr);

}  // namespace hsring::train
