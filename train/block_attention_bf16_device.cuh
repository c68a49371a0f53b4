// Device-side pieces shared by the two builds of the bf16 block attention: the mma.sync
// kernels (train/cuda_block_attention_bf16.cu, every architecture) and the wgmma ones
// (train/cuda_block_attention_wgmma.cu, sm_90a only). The kernels' arguments, the query
// indexing and the bf16 packing of accumulators (cp.async and the pair rounding are gpu/'s).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/bf16.cuh"
#include "gpu/cp_async.cuh"
#include "gpu/online_softmax.cuh"
#include "train/block_attention_tile.cuh"
#include "train/cuda_block_attention_bf16.h"

namespace hsring::train::attention_bf16 {

using bf16 = __nv_bfloat16;

// The device helpers of gpu/ both builds use.
using gpu::cp_async16;
using gpu::cp_async_commit;
using gpu::cp_async_wait;
using gpu::online_softmax_step;
using gpu::pack_bf16;
using gpu::smem_address;

constexpr int kRows = 64;  // query vectors or keys per CTA
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct Tensors {
  const bf16 *q, *dout, *ctx_k, *ctx_v, *block_k, *block_v;
};

struct Args {
  Tensors t;
  const float* lse;  // backward
  const float* delta;
  const int32_t* context;
  const int32_t* order;  // the query-side CTAs' blocks, longest context first; or null
  const BlockKeyWork* work;
  BlockAttentionDims d;
  float *out, *lse_w, *dq, *d_ctx_k, *d_ctx_v, *d_block_k, *d_block_v, *partial;
  bf16* out_bf16;  // forward: out rounded too, when not null
};

// 2^x in one instruction, results below 2^-126 flushed to zero (exp2f spends three more a
// value on them): softmax probabilities that small are zero to every bf16 product.
__device__ inline float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// The A fragment of a 16x16 product from two 16x8 accumulators (columns 0-7, then 8-15):
// the m16n8k16 layout of mma.sync, which is also a warp's share of wgmma's register A.
__device__ inline void accumulators_to_a(uint32_t (&a)[4], const float (&left)[4],
                                         const float (&right)[4]) {
  a[0] = pack_bf16(left[0], left[1]);
  a[1] = pack_bf16(left[2], left[3]);
  a[2] = pack_bf16(right[0], right[1]);
  a[3] = pack_bf16(right[2], right[3]);
}

// query_index in 32 bits and without a division: v / group by one multiply-high, exact for
// v and group below 2^16, and the index below 2^31 (valid_dims). The key side indexes every
// row of every query tile it loads; with a division and 64-bit arithmetic that indexing
// cost about half as many instructions as the tile's products.
struct QueryIndexer {
  uint32_t block_size, heads, group, magic, head0;
  __device__ QueryIndexer(const BlockAttentionDims& d, uint32_t g)
      : block_size(d.block_size),
        heads(d.heads),
        group(d.heads / d.kv_heads),
        magic(0xFFFFFFFFu / group + 1),  // ceil(2^32 / group); 0 (unused) for group 1
        head0(g * group) {}
  __device__ uint32_t operator()(uint32_t b, uint32_t v) const {
    const uint32_t row = group == 1 ? v : __umulhi(v, magic), head = v - row * group;
    return (b * block_size + row) * heads + head0 + head;
  }
};

// Where a key-side CTA writes dk and dv for its first key (the next keys row_stride floats
// on): the gradients themselves, or partial slot w.slot when its tile is cut into chunks,
// laid out [slot][dk, dv][kv head][kRows keys][head_dim].
struct KeyGradients {
  float *dk, *dv;
  uint64_t row_stride;
};
__device__ inline KeyGradients key_gradients(const Args& a, const BlockKeyWork& w, uint32_t g) {
  const uint64_t hd = a.d.head_dim, kv = a.d.kv_heads;
  if (w.slot >= 0) {
    float* dk = a.partial + (uint64_t(w.slot) * 2 * kv + g) * kRows * hd;
    return {dk, dk + kv * kRows * hd, hd};
  }
  const uint64_t first = (uint64_t(w.first_key) * kv + g) * hd;
  const bool context = w.kind == 0;
  return {(context ? a.d_ctx_k : a.d_block_k) + first, (context ? a.d_ctx_v : a.d_block_v) + first,
          kv * hd};
}

// The key side's query tiles: (block, v0) over blocks [first_block, end_block) that see a
// key of work item w (every block sees its own keys; a context tile is seen by the blocks
// whose context range overlaps it), QT query vectors at a time.
struct KeyWorkQueries {
  const int32_t* context;
  BlockKeyWork w;
  uint32_t nv;  // query vectors of a block for one KV head
  __device__ bool sees(int32_t blk) const {
    return w.kind != 0 ||
           (context[2 * blk + 1] > w.first_key && context[2 * blk] < w.first_key + w.keys);
  }
  __device__ int32_t next_seeing(int32_t blk) const {
    while (blk < w.end_block && !sees(blk)) ++blk;
    return blk;
  }
  // The tile after (blk, v0), QT vectors on: the next v0 of this block, or the next block.
  __device__ void advance(int32_t& blk, uint32_t& v0, uint32_t qt) const {
    v0 += qt;
    if (v0 >= nv) {
      v0 = 0;
      blk = next_seeing(blk + 1);
    }
  }
};

}  // namespace hsring::train::attention_bf16
