// The drafter's operations, each a forward and a hand-written backward over row-major
// arrays, for Real = float (the model) and double (the gradient checks run every op, and
// the whole model, in double so finite differences are exact to ~1e-9).
//
// Conventions shared by every op:
// - Every sum of products accumulates in double, in an order fixed by the shapes alone:
//   results are bit-identical for any thread count and any place of a row in the batch.
// - A backward *writes* the gradient of an op's inputs (or adds it to what is there when
//   `accumulate` is set: residual branches) and *adds* the gradient of its weights, so one
//   flat gradient buffer collects a whole backward and may accumulate several batches.
// - `threads` bounds the threads of one call (parallel_for); small calls run inline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace hsring::train {

// --- Linear (HF layout): x [rows, in], w [out, in], y [rows, out], y = x w^T ---

template <class Real>
void linear_forward(const Real* x, size_t rows, size_t in, const Real* w, size_t out, Real* y,
                    uint32_t threads);
// dx [rows, in] = dy w. May not alias dy or w.
template <class Real>
void linear_backward_input(const Real* dy, size_t rows, size_t out, const Real* w, size_t in,
                           Real* dx, bool accumulate, uint32_t threads);
// dw [out, in] += dy^T x.
template <class Real>
void linear_backward_weight(const Real* dy, size_t rows, size_t out, const Real* x, size_t in,
                            Real* dw, uint32_t threads);

// --- RMSNorm per row: y = x / sqrt(mean(x^2) + eps) * weight ---

// y may alias x.
template <class Real>
void rms_norm_forward(const Real* x, const Real* weight, size_t rows, size_t dim, double eps,
                      Real* y);
// dx written or accumulated (may not alias x or dy), dweight [dim] accumulated.
template <class Real>
void rms_norm_backward(const Real* x, const Real* weight, const Real* dy, size_t rows, size_t dim,
                       double eps, Real* dx, bool accumulate, Real* dweight);

// --- RoPE, HF "rotate_half" pairing (element i with i + head_dim / 2) ---

// cos and sin [rows, head_dim / 2] of position * theta^(-2i / head_dim), computed in double.
template <class Real>
void rope_table(std::span<const int32_t> positions, size_t head_dim, double theta, Real* cos,
                Real* sin);
// Rotates every head of x [rows, heads * head_dim] in place.
template <class Real>
void rope_forward(Real* x, size_t rows, size_t heads, size_t head_dim, const Real* cos,
                  const Real* sin);
// The transpose (inverse) rotation, in place: turns d/d(rotated) into d/d(input).
template <class Real>
void rope_backward(Real* dx, size_t rows, size_t heads, size_t head_dim, const Real* cos,
                   const Real* sin);

// --- Sliding-window causal attention over packed documents, grouped-query ---

// Token t of the document [s, e) attends to tokens max(s, t - window + 1) .. t: never across
// a document boundary, never more than `window` tokens (itself included). Query head h reads
// KV head h / (heads / kv_heads); scores are scaled by 1 / sqrt(head_dim).
struct AttentionShape {
  size_t rows = 0;
  size_t heads = 0;
  size_t kv_heads = 0;
  size_t head_dim = 0;
  size_t window = 0;
};

// q [rows, heads * head_dim], k and v [rows, kv_heads * head_dim], out like q; lse [rows,
// heads] receives each softmax's log-sum-exp for the backward.
// REQUIRES: doc_offsets is 0 = o_0 < o_1 < ... < o_D = rows; heads % kv_heads == 0; window > 0.
template <class Real>
void attention_forward(const Real* q, const Real* k, const Real* v, const AttentionShape& shape,
                       std::span<const int32_t> doc_offsets, Real* out, double* lse,
                       uint32_t threads);
// Given the forward's inputs, out, lse and d/d(out), writes dq, dk, dv. Probabilities are
// recomputed from lse (nothing of size rows x window is stored); dq is computed per query
// row and dk, dv per key row, so no two threads ever add into the same element.
template <class Real>
void attention_backward(const Real* q, const Real* k, const Real* v, const Real* out,
                        const Real* dout, const double* lse, const AttentionShape& shape,
                        std::span<const int32_t> doc_offsets, Real* dq, Real* dk, Real* dv,
                        uint32_t threads);

// --- SwiGLU: out = silu(gate) * up, silu(g) = g / (1 + exp(-g)) ---

template <class Real>
void swiglu_forward(const Real* gate, const Real* up, size_t n, Real* out);
// dgate and dup written; may not alias the inputs.
template <class Real>
void swiglu_backward(const Real* gate, const Real* up, const Real* dout, size_t n, Real* dgate,
                     Real* dup);

// --- Token embedding: y[r] (+)= table[tokens[r]] ---

template <class Real>
void embedding_forward(const Real* table, const int32_t* tokens, size_t rows, size_t dim, Real* y,
                       bool accumulate);
// dtable[v] += sum of dy[r] over rows r with tokens[r] == v (in row order, in double).
template <class Real>
void embedding_backward(const int32_t* tokens, const Real* dy, size_t rows, size_t dim,
                        Real* dtable);

// --- Cross-entropy against labels, with top-1 agreement ---

struct CrossEntropySums {
  double loss = 0;       // sum over counted rows of logsumexp(logits) - logits[label]
  uint64_t counted = 0;  // rows whose label is in [0, vocab)
  uint64_t agreed = 0;   // counted rows whose argmax (first on ties) equals the label
};

// logits [rows, vocab]. When dlogits is not null it receives d(grad_scale * loss)/d(logits):
// grad_scale * (softmax - onehot) on counted rows, zero on ignored ones; it may alias logits.
// REQUIRES: every label is below vocab (negative labels are ignored).
template <class Real>
CrossEntropySums cross_entropy(const Real* logits, const int32_t* labels, size_t rows, size_t vocab,
                               double grad_scale, Real* dlogits, uint32_t threads);

}  // namespace hsring::train
