// The DFlash drafter's attention (docs/drafter-training.md, "The DFlash drafter"): the B
// query rows of draft block b attend to a range of context rows, [context[b].begin,
// context[b].end), and to all B rows of their own block (bidirectionally); to nothing else.
// A forward keeping each softmax's log-sum-exp and a hand-written backward, for Real =
// float and double, with the conventions of ops/ (ops/sums.h, Sums::kDouble): sums in
// double in an order fixed by the shapes, results bit-identical for any thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "train/block_attention_shape.h"

namespace hsring::train {

// The context rows one block sees.
struct ContextRange {
  size_t begin = 0;
  size_t end = 0;
};

// q [rows, heads * hd] (row b * B + j is position j of block b); ctx_k, ctx_v [context_rows,
// kv_heads * hd]; block_k, block_v [rows, kv_heads * hd]; out like q; lse [rows, heads]
// receives each softmax's log-sum-exp for the backward. context: one range per block.
// Throws Error(kModel) when a range is reversed or past context_rows, or when
// heads is not a multiple of kv_heads.
template <class Real>
void block_attention_forward(const Real* q, const Real* ctx_k, const Real* ctx_v,
                             const Real* block_k, const Real* block_v,
                             const BlockAttentionShape& shape,
                             std::span<const ContextRange> context, Real* out, double* lse,
                             uint32_t threads);

// Given the forward's inputs, out, lse and d/d(out), writes dq, d_ctx_k, d_ctx_v (zero on
// rows no block sees), d_block_k and d_block_v. Probabilities are recomputed from lse; dq is
// computed per query row, the block key gradients per block key row over its block's
// queries, the context key gradients per context row over the blocks that see it: no two
// threads ever write one element.
template <class Real>
void block_attention_backward(const Real* q, const Real* ctx_k, const Real* ctx_v,
                              const Real* block_k, const Real* block_v, const Real* out,
                              const Real* dout, const double* lse, const BlockAttentionShape& shape,
                              std::span<const ContextRange> context, Real* dq, Real* d_ctx_k,
                              Real* d_ctx_v, Real* d_block_k, Real* d_block_v, uint32_t threads);

}  // namespace hsring::train
