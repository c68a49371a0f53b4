// The fp32 CPU building blocks of Qwen3.5's Gated DeltaNet layers (linear attention), as
// transformers defines them, over packed documents: every document starts from a zero
// convolution history and a zero recurrent state, so nothing leaks across a boundary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "model/model_config.h"

namespace hsring {

// y[t, c] = silu(sum_j w[c, j] * x[t - (kernel - 1) + j, c]) per channel c of x [rows,
// channels], with x taken as 0 before its document's first token. w is [channels, kernel].
// y must not alias x.
void causal_conv_silu(const float* x, size_t channels, const float* w, size_t kernel,
                      std::span<const int32_t> doc_offsets, float* y);

// The gates of each token and value head from the a and b projections [rows, v_heads]:
// g = -exp(a_log) * softplus(a + dt_bias) (the log of the state's decay), beta = sigmoid(b).
// In place: a becomes g, b becomes beta.
void delta_gates(float* a, float* b, size_t rows, size_t v_heads, const float* a_log,
                 const float* dt_bias);

// The gated delta rule. qkv [rows, conv_dim] holds q | k | v after the convolution; g and
// beta [rows, v_heads]. Per value head h (query / key head h / (v_heads / qk_heads)), with q
// and k L2-normalised (eps 1e-6) and q scaled by 1 / sqrt(qk_head_dim), a state S
// [qk_head_dim, v_head_dim] that is zero at each document start:
//   S = exp(g_t) S;  S += k_t (beta_t (v_t - S^T k_t))^T;  out_t = S^T q_t.
// out is [rows, v_dim]. q and k in qkv are normalised in place.
void gated_delta_rule(float* qkv, const float* g, const float* beta, size_t rows,
                      const DeltaNetShape& shape, std::span<const int32_t> doc_offsets, float* out,
                      uint32_t threads);

// Per row of `dim`: y = weight * x / sqrt(mean(x^2) + eps) * silu(gate). y may alias x.
void gated_rms_norm(const float* x, const float* gate, const float* weight, size_t rows, size_t dim,
                    double eps, float* y);

}  // namespace hsring
