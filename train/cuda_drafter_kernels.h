// The CUDA kernels of the drafter's training step, behind plain host functions (no CUDA
// syntax here: C++ sources call them; C++17, as nvcc compiles it). Each launches on `stream`
// and returns the launch's error; none synchronises. Activations, gradients, weights and
// optimizer state are fp32 row-major arrays; the products between them are cuBLAS's
// (train/cuda_gemm.h). The maths of each op is the CPU reference's (ops/), which
// the GPU tests compare against.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace hsring::train::cuda {

// The batch's bf16 features (the ring's dtype) widened to fp32: n values.
cudaError_t launch_bf16_to_float(const uint16_t* in, size_t n, float* out, cudaStream_t stream);
// fp32 rounded to bf16 (to nearest, ties to even; NaN stays NaN): n values, the operands of
// the bf16 tensor-core products (train/cuda_gemm.h).
cudaError_t launch_float_to_bf16(const float* in, size_t n, uint16_t* out, cudaStream_t stream);
// in [rows, cols] rounded the same way into out's rows, out_stride elements apart (>= cols;
// else cudaErrorInvalidValue): a column range of a wider array.
cudaError_t launch_float_to_bf16_rows(const float* in, size_t rows, size_t cols, uint16_t* out,
                                      size_t out_stride, cudaStream_t stream);

// Each row's document bounds from cu_seqlens offsets [docs + 1]: start[t], end[t].
cudaError_t launch_doc_bounds(const int32_t* doc_offsets, uint32_t docs, uint32_t rows,
                              int32_t* start, int32_t* end, cudaStream_t stream);

// y = x / sqrt(mean(x^2) + eps) * weight per row of [rows, dim], into y (fp32), y_bf16
// (rounded as launch_float_to_bf16 rounds), or both; a null array is not written. x_copy,
// when given, receives x as it is (a residual's copy, on the pass that reads it anyway).
// y and x_copy may not alias x.
cudaError_t launch_rms_norm_forward(const float* x, const float* weight, uint32_t rows,
                                    uint32_t dim, float eps, float* y, cudaStream_t stream,
                                    uint16_t* y_bf16 = nullptr, float* x_copy = nullptr);
// RMSNorm's backward in one pass over x and dy: dx into dx (written, or added to with
// `accumulate`, which needs dx), dx_bf16 (rounded as launch_float_to_bf16 rounds the fp32
// dx) or both, and dweight += sum over rows of dy * x / rms(x). Each of up to
// kRmsNormBackwardBlocks blocks sums its rows' share of dweight into partials
// [kRmsNormBackwardBlocks * dim], which are then added in block order, in double: no
// atomics, the same bits on every run.
inline constexpr uint32_t kRmsNormBackwardBlocks = 512;
cudaError_t launch_rms_norm_backward_rows(const float* x, const float* weight, const float* dy,
                                          uint32_t rows, uint32_t dim, float eps, float* dx,
                                          bool accumulate, float* dweight, float* partials,
                                          cudaStream_t stream, uint16_t* dx_bf16 = nullptr);

// RoPE on every head of x [rows, heads * head_dim] in place, pairing i with i + head_dim / 2
// (HF rotate_half); cos and sin [rows, head_dim / 2]. inverse: the transpose rotation,
// which turns d/d(rotated) into d/d(input).
cudaError_t launch_rope_apply(float* x, uint32_t rows, uint32_t heads, uint32_t head_dim,
                              const float* cos, const float* sin, bool inverse,
                              cudaStream_t stream);

// out = silu(gate) * up, and its backward (dgate, dup written), computed in fp32 from
// inputs in fp32 or (the uint16_t overloads) bf16. Each output goes to its fp32 array, to
// its bf16 one (rounded as launch_float_to_bf16 rounds: the bf16 products' operand without
// a rounding pass), or both; a null array is not written.
cudaError_t launch_swiglu_forward(const float* gate, const float* up, size_t n, float* out,
                                  cudaStream_t stream, uint16_t* out_bf16 = nullptr);
cudaError_t launch_swiglu_forward(const uint16_t* gate, const uint16_t* up, size_t n, float* out,
                                  cudaStream_t stream, uint16_t* out_bf16 = nullptr);
cudaError_t launch_swiglu_backward(const float* gate, const float* up, const float* dout, size_t n,
                                   float* dgate, float* dup, cudaStream_t stream,
                                   uint16_t* dgate_bf16 = nullptr, uint16_t* dup_bf16 = nullptr);
cudaError_t launch_swiglu_backward(const uint16_t* gate, const uint16_t* up, const uint16_t* dout,
                                   size_t n, float* dgate, float* dup, cudaStream_t stream,
                                   uint16_t* dgate_bf16 = nullptr, uint16_t* dup_bf16 = nullptr);

// y[r] += table[tokens[r]] ([rows, dim]); dtable[tokens[r]] += dy[r] (atomics: rows that
// share a token add in any order).
cudaError_t launch_embedding_forward(const float* table, const int32_t* tokens, uint32_t rows,
                                     uint32_t dim, float* y, cudaStream_t stream);
// y[r] = table[index[r]] ([rows, dim]), or zeros where index[r] < 0, into y (fp32), y_bf16
// (rounded), or both: rows gathered, or (by the inverse index) scattered back among zeros.
// The table's rows are table_stride elements apart (0: dim), so that it may be a column
// range of a wider array.
cudaError_t launch_gather_rows(const float* table, const int32_t* index, uint32_t rows,
                               uint32_t dim, float* y, cudaStream_t stream,
                               uint16_t* y_bf16 = nullptr, uint32_t table_stride = 0);
// The same from a bf16 table (its values exactly, in either output).
cudaError_t launch_gather_rows(const uint16_t* table, const int32_t* index, uint32_t rows,
                               uint32_t dim, float* y, cudaStream_t stream,
                               uint16_t* y_bf16 = nullptr, uint32_t table_stride = 0);

// y [cols] = the sum of rows index[0..n) of x [.., cols], in float, into y (fp32), y_bf16
// (rounded), or both. The rows are summed in chunks of n / kSumRowChunks, then the chunks
// in order: the same bits every run. partials: kSumRowChunks * cols floats of scratch.
inline constexpr uint32_t kSumRowChunks = 64;
cudaError_t launch_sum_rows(const float* x, const int32_t* index, uint32_t n, uint32_t cols,
                            float* partials, float* y, uint16_t* y_bf16, cudaStream_t stream);
cudaError_t launch_sum_rows(const uint16_t* x, const int32_t* index, uint32_t n, uint32_t cols,
                            float* partials, float* y, uint16_t* y_bf16, cudaStream_t stream);
cudaError_t launch_embedding_backward(const int32_t* tokens, const float* dy, uint32_t rows,
                                      uint32_t dim, float* dtable, cudaStream_t stream);

// a[i] += b[i].
cudaError_t launch_add(float* a, const float* b, size_t n, cudaStream_t stream);
// x[i] *= factor.
cudaError_t launch_scale(float* x, size_t n, float factor, cudaStream_t stream);

// Cross-entropy of each row of logits [rows, vocab] against labels (< 0: ignored).
// row_loss[r] = logsumexp - logit[label] (0 when ignored); row_agreed[r] = 1 when the
// argmax (first on ties) is the label. With backward, the logits are overwritten by
// grad_scale * (softmax - onehot), zero on ignored rows; with row_weight [rows] (DFlash's
// per-position decay) row r's gradient is scaled by row_weight[r] too. bf16 logits (as the
// bf16 head product writes them) are read as the floats they hold, and their gradient is
// the same fp32 value rounded as launch_float_to_bf16 rounds.
cudaError_t launch_cross_entropy(float* logits, const int32_t* labels, uint32_t rows,
                                 uint32_t vocab, float grad_scale, bool backward, float* row_loss,
                                 int32_t* row_agreed, cudaStream_t stream,
                                 const float* row_weight = nullptr);
cudaError_t launch_cross_entropy(uint16_t* logits, const int32_t* labels, uint32_t rows,
                                 uint32_t vocab, float grad_scale, bool backward, float* row_loss,
                                 int32_t* row_agreed, cudaStream_t stream,
                                 const float* row_weight = nullptr);

struct AttentionDims {
  uint32_t rows = 0, heads = 0, kv_heads = 0, head_dim = 0, window = 0;
};
// True when the attention kernels take this head_dim: a multiple of 32 up to 256.
bool attention_head_dim_supported(uint32_t head_dim);
// Sliding-window causal attention over packed documents (ops/attention.h has the rule):
// out [rows, heads * head_dim] and each softmax's log-sum-exp lse [rows, heads].
cudaError_t launch_attention_forward(const float* q, const float* k, const float* v,
                                     const int32_t* doc_start, AttentionDims dims, float* out,
                                     float* lse, cudaStream_t stream);
// dq, dk, dv written from the forward's inputs, out, lse and dout; delta [rows, heads] is
// scratch (dout . out per query head).
cudaError_t launch_attention_backward(const float* q, const float* k, const float* v,
                                      const float* out, const float* dout, const float* lse,
                                      const int32_t* doc_start, const int32_t* doc_end,
                                      AttentionDims dims, float* delta, float* dq, float* dk,
                                      float* dv, cudaStream_t stream);

// Sum of squares of x [n] (fp32 or bf16), in double, into partials [sum_squares_blocks(n)]
// (at most kNormPartials; then summed on the host).
inline constexpr uint32_t kNormPartials = 1024;
uint32_t sum_squares_blocks(size_t n);
cudaError_t launch_sum_squares(const float* x, size_t n, double* partials, cudaStream_t stream);
cudaError_t launch_sum_squares(const uint16_t* x, size_t n, double* partials, cudaStream_t stream);

struct AdamWStep {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0;
  double keep = 1;         // 1 - lr * weight_decay on decayed tensors, else 1
  double clip = 1;         // gradient scale from global-norm clipping
  double correction1 = 1;  // 1 - beta1^t
  double correction2 = 1;  // 1 - beta2^t
};
// One AdamW update of n parameters (train/optimizer.h has the formula), in float per
// element (the CPU reference computes in double: within 1e-6 of it). With params_bf16 [n],
// the updated weights are also written there rounded to bf16 (the bits launch_float_to_bf16
// gives). The gradients in fp32 or bf16 (widened: the same update as their fp32 values).
cudaError_t launch_adamw(float* params, const float* grads, float* m, float* v, size_t n,
                         AdamWStep step, cudaStream_t stream, uint16_t* params_bf16 = nullptr);
cudaError_t launch_adamw(float* params, const uint16_t* grads, float* m, float* v, size_t n,
                         AdamWStep step, cudaStream_t stream, uint16_t* params_bf16 = nullptr);

}  // namespace hsring::train::cuda
