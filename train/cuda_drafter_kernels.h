// The CUDA kernels that only the drafter's training step has, behind plain host functions
// (no CUDA syntax here: C++ sources call them; C++17, as nvcc compiles it); the ops it
// shares with the target's forward (RMSNorm, SwiGLU, RoPE, embedding, row gathers, bf16
// conversion) are the gpu/ops/ library's. Each launches on `stream` and returns the
// launch's error; none synchronises. Activations, gradients, weights and optimizer state are
// fp32 row-major arrays; the products between them are cuBLAS's (train/cuda_gemm.h). The
// maths of each op is the CPU reference's (ops/), which the GPU tests compare against.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ops/attention_shape.h"
#include "train/adamw_step.h"

namespace hsring::train {

// Each row's document bounds from cu_seqlens offsets [docs + 1]: start[t], end[t].
cudaError_t launch_doc_bounds(const int32_t* doc_offsets, uint32_t docs, uint32_t rows,
                              int32_t* start, int32_t* end, cudaStream_t stream);

// y [cols] = the sum of rows index[0..n) of x [.., cols], in float, into y (fp32), y_bf16
// (rounded), or both. The rows are summed in chunks of n / kSumRowChunks, then the chunks
// in order: the same bits every run. partials: kSumRowChunks * cols floats of scratch.
inline constexpr uint32_t kSumRowChunks = 64;
cudaError_t launch_sum_rows(const float* x, const int32_t* index, uint32_t n, uint32_t cols,
                            float* partials, float* y, uint16_t* y_bf16, cudaStream_t stream);
cudaError_t launch_sum_rows(const uint16_t* x, const int32_t* index, uint32_t n, uint32_t cols,
                            float* partials, float* y, uint16_t* y_bf16, cudaStream_t stream);
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
// the same fp32 value rounded as gpu::launch_float_to_bf16 rounds.
cudaError_t launch_cross_entropy(float* logits, const int32_t* labels, uint32_t rows,
                                 uint32_t vocab, float grad_scale, bool backward, float* row_loss,
                                 int32_t* row_agreed, cudaStream_t stream,
                                 const float* row_weight = nullptr);
cudaError_t launch_cross_entropy(uint16_t* logits, const int32_t* labels, uint32_t rows,
                                 uint32_t vocab, float grad_scale, bool backward, float* row_loss,
                                 int32_t* row_agreed, cudaStream_t stream,
                                 const float* row_weight = nullptr);

// True when the attention kernels take this head_dim: a multiple of 32 up to 256.
bool attention_head_dim_supported(uint32_t head_dim);
// Sliding-window causal attention over packed documents (ops/attention_shape.h has the rule,
// ops/attention.h the CPU op): out [rows, heads * head_dim] and each softmax's log-sum-exp lse
// [rows, heads]. cudaErrorInvalidValue when the head_dim is not supported, heads is not a
// multiple of kv_heads, or a count does not fit the kernels' 32 bits.
cudaError_t launch_attention_forward(const float* q, const float* k, const float* v,
                                     const int32_t* doc_start, const ops::AttentionShape& shape,
                                     float* out, float* lse, cudaStream_t stream);
// dq, dk, dv written from the forward's inputs, out, lse and dout; delta [rows, heads] is
// scratch (dout . out per query head).
cudaError_t launch_attention_backward(const float* q, const float* k, const float* v,
                                      const float* out, const float* dout, const float* lse,
                                      const int32_t* doc_start, const int32_t* doc_end,
                                      const ops::AttentionShape& shape, float* delta, float* dq,
                                      float* dk, float* dv, cudaStream_t stream);

// Sum of squares of x [n] (fp32 or bf16), in double, into partials [sum_squares_blocks(n)]
// (at most kNormPartials; then summed on the host).
inline constexpr uint32_t kNormPartials = 1024;
uint32_t sum_squares_blocks(size_t n);
cudaError_t launch_sum_squares(const float* x, size_t n, double* partials, cudaStream_t stream);
cudaError_t launch_sum_squares(const uint16_t* x, size_t n, double* partials, cudaStream_t stream);

// One AdamW update of n parameters (train/optimizer.h has the formula), in float per
// element (the CPU reference computes in double: within 1e-6 of it). With params_bf16 [n],
// the updated weights are also written there rounded to bf16 (the bits launch_float_to_bf16
// gives). The gradients in fp32 or bf16 (widened: the same update as their fp32 values).
cudaError_t launch_adamw(float* params, const float* grads, float* m, float* v, size_t n,
                         AdamWStep step, cudaStream_t stream, uint16_t* params_bf16 = nullptr);
cudaError_t launch_adamw(float* params, const uint16_t* grads, float* m, float* v, size_t n,
                         AdamWStep step, cudaStream_t stream, uint16_t* params_bf16 = nullptr);

}  // namespace hsring::train
