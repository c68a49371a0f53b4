// Causal softmax attention over packed documents, grouped-query, with an optional sliding
// window: forward (with each softmax's log-sum-exp kept for the backward) and backward.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "ops/attention_shape.h"
#include "ops/sums.h"

namespace hsring::ops {

// q [rows, heads * head_dim], k and v [rows, kv_heads * head_dim], out like q. lse [rows,
// heads], when not null, receives each softmax's log-sum-exp for the backward. Scores and
// the weighted sum of values are fp32 with kFloat (the softmax's total in double either
// way), double with kDouble.
// REQUIRES: doc_offsets is 0 = o_0 < o_1 < ... < o_D = rows; heads % kv_heads == 0;
// sums == kDouble unless Real is float.
template <class Real>
void attention_forward(const Real* q, const Real* k, const Real* v, const AttentionShape& shape,
                       std::span<const int32_t> doc_offsets, Real* out, double* lse, Sums sums,
                       uint32_t threads);

// Given the forward's inputs, out, lse and d/d(out), writes dq, dk, dv, in double.
// Probabilities are recomputed from lse (nothing of size rows x window is stored); dq is
// computed per query row and dk, dv per key row, so no two threads ever add into the same
// element.
template <class Real>
void attention_backward(const Real* q, const Real* k, const Real* v, const Real* out,
                        const Real* dout, const double* lse, const AttentionShape& shape,
                        std::span<const int32_t> doc_offsets, Real* dq, Real* dk, Real* dv,
                        uint32_t threads);

}  // namespace hsring::ops
