// The target's decoder layer (Llama / Qwen2 / Qwen3 / Qwen3.5's attention layers), described
// once over ops/: an attention block and an MLP block, each pre-norm with a residual skip,
// forward and hand-written backward. Its users:
//   - model/cpu_target_model.cc: forward only (Sums::kFloat, activations as scratch);
//   - train/causal_lm.cc, the built-in target trained on the CPU (Sums::kDouble);
//   - train/same_position_model.cc, the same-position drafter (one layer, a sliding window);
//   - train/dflash_model.cc, whose layer is a variant: its own attention block (the draft
//     block reads the context's keys and values), this MLP block.
// It lives in model/, not train/, because the target's forward needs it and model/ stands
// below train/; it is not an op, so it is not in ops/.
//
//   attention block:  a = RMSNorm(x);  q, k, v = a Wq^T (+ bq), a Wk^T (+ bk), a Wv^T (+ bv)
//                     q, k = RoPE(RMSNorm_head(q)), RoPE(RMSNorm_head(k))   (QK-norm: Qwen3)
//                     out = x + [Attention(q, k, v) * sigmoid(gate)] Wo^T   (gate: Qwen3.5)
//   MLP block:        m = RMSNorm(x);  out = x + (silu(m Wg^T) * m Wu^T) Wd^T
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "model/decoder_layer_shape.h"
#include "model/model_config.h"
#include "ops/sums.h"

namespace hsring {

// The attention layers' shape of a target config.
DecoderLayerShape decoder_layer_shape(const ModelConfig& config);

// The tensors of each block, as P = const Real* (weights) or Real* (their gradients, added
// to). Pointers of features the shape does not have are not read and may be null.
template <class P>
struct AttentionBlockParams {
  P norm{}, q{}, k{}, v{}, o{}, q_bias{}, k_bias{}, v_bias{}, q_norm{}, k_norm{};
};
template <class P>
struct MlpBlockParams {
  P norm{}, gate{}, up{}, down{};
};

// What a block's backward needs from its forward ([rows, *] each); for a forward-only user,
// scratch kept between calls. q and k hold the rotated values; q_raw, k_raw the projections
// before the QK-norm (QK-norm only).
template <class Real>
struct AttentionBlockActivations {
  std::vector<Real> a, q_raw, k_raw, q, k, v, gate, attn;
  std::vector<double> lse;
};
template <class Real>
struct MlpBlockActivations {
  std::vector<Real> m, gate, up, act;
};

// Gradient scratch of the backwards, shared by every layer of a model.
template <class Real>
struct BlockGradScratch {
  std::vector<Real> d_a, d_q, d_k, d_v, d_qn, d_kn, d_mid, d_gate, d_up;
};

// out [rows, hidden] = x + the attention branch; out may not alias x. cos and sin are
// [rows, rotary_dim / 2] (RoPE tables of the rows' positions).
// REQUIRES: doc_offsets partitions [0, rows); heads % kv_heads == 0.
template <class Real>
void attention_block_forward(const DecoderLayerShape& shape,
                             const AttentionBlockParams<const Real*>& w, const Real* x, size_t rows,
                             std::span<const int32_t> doc_offsets, const Real* cos, const Real* sin,
                             AttentionBlockActivations<Real>& acts, Real* out, ops::Sums sums,
                             uint32_t threads);

// d_residual holds d(out) on entry and d(x) on return (the skip passes it through, the
// branch adds to it); the weights' gradients are added to grads. x and acts are the
// forward's.
// REQUIRES: !shape.attention_gate; the forward ran with Sums::kDouble on these x and acts.
template <class Real>
void attention_block_backward(const DecoderLayerShape& shape,
                              const AttentionBlockParams<const Real*>& w,
                              const AttentionBlockParams<Real*>& grads, const Real* x, size_t rows,
                              std::span<const int32_t> doc_offsets, const Real* cos,
                              const Real* sin, const AttentionBlockActivations<Real>& acts,
                              Real* d_residual, BlockGradScratch<Real>& scratch, uint32_t threads);

// out [rows, hidden] = down(silu(gate(x)) * up(x)) of x [rows, hidden] (no norm, no skip):
// the MLP of the block below and of each expert of a mixture (model/cpu_moe.h). gate and up
// [rows, width] receive the projections, act [rows, width] their SwiGLU (act may alias
// gate or up when nothing needs them after).
template <class Real>
void swiglu_mlp_forward(const Real* x, size_t rows, size_t hidden,
                        const MlpBlockParams<const Real*>& w, size_t width, Real* gate, Real* up,
                        Real* act, Real* out, ops::Sums sums, uint32_t threads);

// out [rows, hidden] = x + swiglu_mlp(RMSNorm(x)); out may not alias x.
template <class Real>
void mlp_block_forward(const DecoderLayerShape& shape, const MlpBlockParams<const Real*>& w,
                       const Real* x, size_t rows, MlpBlockActivations<Real>& acts, Real* out,
                       ops::Sums sums, uint32_t threads);

// As attention_block_backward: d_residual is d(out) on entry, d(x) on return.
template <class Real>
void mlp_block_backward(const DecoderLayerShape& shape, const MlpBlockParams<const Real*>& w,
                        const MlpBlockParams<Real*>& grads, const Real* x, size_t rows,
                        const MlpBlockActivations<Real>& acts, Real* d_residual,
                        BlockGradScratch<Real>& scratch, uint32_t threads);

}  // namespace hsring
