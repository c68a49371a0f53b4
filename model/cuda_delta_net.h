// The CUDA kernels of Qwen3.5's Gated DeltaNet layers, behind plain host functions (as
// model/cuda_kernels.h): the causal convolution with q/k normalisation, the decay and beta
// gates, the chunked gated delta rule and the gated RMSNorm. Every document starts from a
// zero convolution history and a zero state: chunks never span two documents. No atomics;
// every output comes from one fixed sequence of operations, so a batch always gives the
// same bits.
//
// The delta rule runs in chunks of kDeltaChunk tokens (the WY / UT-transform form of the
// Gated DeltaNet paper, arXiv 2412.06464). Within a chunk of tokens 1..L with state S0
// ([dk, dv]) at its start, gamma_i = exp(G_i) where G_i is the sum of g over tokens 1..i,
// the state's new values u_i = beta_i (v_i - S_{i-1}^T k_i decayed) solve the
// unit-lower-triangular system
//   u_i + sum_{j<i} beta_i (gamma_i / gamma_j) (k_i . k_j) u_j = beta_i v_i - beta_i gamma_i S0^T
//   k_i,
// so U = U' - W S0 with U' = T diag(beta) V and W = T diag(beta gamma) K, T the system's
// inverse. Then
//   O = diag(gamma) Q S0 + (causal (gamma_i / gamma_j) (q_i . k_j)) U,
//   S_L = gamma_L S0 + K^T diag(gamma_L / gamma) U.
// Pass 1 (every chunk and value head in parallel) forms U', W and the masked score matrix P;
// pass 2 walks each document's chunks in order per (value head, slice of dv columns: the
// columns of S evolve independently). q, k and v arrive in bf16 (the forward's; the TF32
// variants read fp32), the state and every intermediate sum are fp32, and the products run on
// the tensor cores (model/cuda_delta_prepare_bf16.cu and cuda_delta_state_bf16.cu;
// model/cuda_delta_rule.cu for TF32).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/cuda_kernels.h"
#include "model/delta_net_shape.h"

namespace hsring {

inline constexpr uint32_t kDeltaChunk = 64;        // model/forward_flops.h counts with it
inline constexpr uint32_t kDeltaMaxHeadDim = 128;  // delta_net_supports' bound on both dims
// Head sizes the kernels take: multiples of 8 up to 128 (Qwen3.5: 128 and 128), so every
// head of a bf16 q | k | v row starts 16 bytes apart from the row's start.
bool delta_net_supports(uint32_t qk_head_dim, uint32_t v_head_dim);

// Rows [begin, end) of one document or one chunk of it.
struct DeltaSpan {
  int32_t begin;
  int32_t end;
};

// The chunks of a batch with these cu_seqlens (count = documents + 1): each document cut
// into kDeltaChunk-token pieces from its first token (the last one shorter). At most
// tokens + documents chunks.
std::vector<DeltaSpan> delta_chunks(const int32_t* doc_offsets, size_t count);
// The documents, longest first (pass 2's blocks walk one each: the long ones start first).
std::vector<DeltaSpan> delta_documents(const int32_t* doc_offsets, size_t count);
// doc_starts[t] = the first row of token t's document.
std::vector<int32_t> delta_doc_starts(const int32_t* doc_offsets, size_t count);

// qkv bf16 [rows, conv_dim] (q | k | v) = silu(causal depthwise conv of x), x the first
// conv_dim columns of bf16 rows of stride x_stride, w bf16 [conv_dim, kernel], taps before
// the document's first row (doc_starts) read as zero; then each q and k head L2-normalised
// (x / sqrt(sum x^2 + 1e-6)) and q scaled by 1 / sqrt(qk_head_dim). The sums are fp32, each
// value rounded once as it is written: the delta rule's products take bf16 operands, so
// writing them in bf16 here halves the bytes of this write and of the rule's reads.
// REQUIRES: x_stride even (x is read in pairs).
cudaError_t launch_delta_conv(const Bf16* x, uint64_t x_stride, uint32_t rows, DeltaNetShape shape,
                              const Bf16* w, const int32_t* doc_starts, Bf16* qkv,
                              cudaStream_t stream);

// g = -exp(a_log) softplus(a + dt_bias), beta = sigmoid(b), each fp32 [rows, v_heads]; a
// and b are bf16 columns [rows, v_heads] of rows of stride `stride`.
cudaError_t launch_delta_gates(const Bf16* a, const Bf16* b, uint64_t stride, uint32_t rows,
                               uint32_t v_heads, const float* a_log, const float* dt_bias, float* g,
                               float* beta, cudaStream_t stream);

// The scratch of the delta rule over `rows` tokens, in floats: pass 1's results that pass 2
// reads, for either variant below (model/cuda_delta_rule_passes.h lays them out).
uint64_t delta_scratch_floats(uint32_t rows, DeltaNetShape shape);

// The chunked gated delta rule, the forward's: out bf16 [rows, v_dim] (as fla's) from qkv
// (launch_delta_conv's output), g and beta (launch_delta_gates'). Every product is a bf16
// mma.sync product with fp32 accumulation, the system solved blockwise; pass 1 writes pass
// 2's operands W, P and U' in bf16, pass 2 reads Q and K from qkv and keeps the state's fp32
// value in registers: flash-linear-attention's precision (4.5e-3 relative error against the
// per-token recurrence, measured with the output rounded; bench/delta_rule_rounding.py
// models 4e-3 before that rounding, for both). chunks and
// documents come from delta_chunks and delta_documents of the same batch, in device memory;
// scratch holds delta_scratch_floats(rows, shape) floats, 16-byte aligned. REQUIRES:
// delta_net_supports(...), v_heads a multiple of qk_heads, qkv 16-byte aligned.
cudaError_t launch_delta_rule(const Bf16* qkv, const float* g, const float* beta,
                              DeltaNetShape shape, uint32_t rows, const DeltaSpan* chunks,
                              uint32_t chunk_count, const DeltaSpan* documents,
                              uint32_t document_count, float* scratch, Bf16* out,
                              cudaStream_t stream);

// The same rule from fp32 q | k | v with TF32 products, the yardstick of the bf16 rule's
// rounding (tests, bench/forward_bench.cc):
//   - kTf32: every product one TF32 product (11 significant bits; 4.7e-4);
//   - kTf32x3: each operand split into a TF32 part and its TF32 remainder (three products:
//     fp32 accuracy, 2.5e-6, at 1.6 times kTf32's time).
enum class DeltaTf32Precision { kTf32, kTf32x3 };
cudaError_t launch_delta_rule_tf32(const float* qkv, const float* g, const float* beta,
                                   DeltaNetShape shape, uint32_t rows, const DeltaSpan* chunks,
                                   uint32_t chunk_count, const DeltaSpan* documents,
                                   uint32_t document_count, float* scratch, float* out,
                                   cudaStream_t stream, DeltaTf32Precision precision);

// The recurrent form, one token after another (the test oracle; far slower): the inputs
// and output of launch_delta_rule_tf32.
cudaError_t launch_delta_rule_recurrent(const float* qkv, const float* g, const float* beta,
                                        DeltaNetShape shape, const DeltaSpan* documents,
                                        uint32_t document_count, float* out, cudaStream_t stream);

// y bf16 [rows, v_heads * dim] = weight * x / sqrt(mean(x^2) + eps) * silu(z) per head of
// `dim`, x bf16 [rows, v_heads * dim] (launch_delta_rule's out), z bf16 columns of rows of
// stride z_stride; the sums fp32. REQUIRES: dim and z_stride even.
cudaError_t launch_gated_rms_norm(const Bf16* x, const Bf16* z, uint64_t z_stride, uint32_t rows,
                                  uint32_t v_heads, uint32_t dim, const float* weight, float eps,
                                  Bf16* y, cudaStream_t stream);

}  // namespace hsring
