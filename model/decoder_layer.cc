#include "model/decoder_layer.h"

#include <algorithm>
#include <cmath>

#include "common/contract.h"
#include "ops/attention.h"
#include "ops/bias.h"
#include "ops/linear.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/scratch.h"
#include "ops/swiglu.h"

namespace hsring {

namespace {

ops::RopeShape rope_shape(const DecoderLayerShape& s, size_t rows, size_t heads) {
  return {rows, heads, s.head_dim, s.rotary_dim};
}

}  // namespace

DecoderLayerShape decoder_layer_shape(const ModelConfig& c) {
  DecoderLayerShape s;
  s.hidden = c.hidden_size;
  s.heads = c.num_heads;
  s.kv_heads = c.num_kv_heads;
  s.head_dim = c.head_dim;
  s.intermediate = c.intermediate_size;
  s.rotary_dim = c.rope_dim();
  s.eps = c.rms_norm_eps;
  s.qk_norm = c.qk_norm;
  s.qkv_bias = c.qkv_bias;
  s.attention_gate = c.attention_gate;
  return s;
}

template <class Real>
void attention_block_forward(const DecoderLayerShape& s, const AttentionBlockParams<const Real*>& w,
                             const Real* x, size_t rows, std::span<const int32_t> doc_offsets,
                             const Real* cos, const Real* sin, AttentionBlockActivations<Real>& a,
                             Real* out, ops::Sums sums, uint32_t threads) {
  HSRING_REQUIRE(out != x);
  const size_t h = s.hidden, qd = s.q_dim(), kvd = s.kv_dim(), hd = s.head_dim;
  ops::grow_to(a.a, rows * h);
  ops::grow_to(a.q, rows * qd);
  ops::grow_to(a.attn, rows * (s.attention_gate ? 2 * qd : qd));
  for (auto* buffer : {&a.k, &a.v}) ops::grow_to(*buffer, rows * kvd);
  ops::grow_to(a.lse, rows * s.heads);
  ops::rms_norm_forward(x, w.norm, rows, h, s.eps, a.a.data(), sums);

  // With QK-norm the projections stay in q_raw / k_raw for its backward.
  if (s.qk_norm) {
    ops::grow_to(a.q_raw, rows * qd);
    ops::grow_to(a.k_raw, rows * kvd);
  }
  Real* q_lin = s.qk_norm ? a.q_raw.data() : a.q.data();
  Real* k_lin = s.qk_norm ? a.k_raw.data() : a.k.data();
  if (s.attention_gate) {
    // Qwen3.5: q_proj gives [q_h | gate_h] per head; attn holds both until split.
    ops::grow_to(a.gate, rows * qd);
    ops::linear_forward(a.a.data(), rows, h, w.q, 2 * qd, a.attn.data(), sums, threads);
    for (size_t r = 0; r < rows * s.heads; ++r) {
      const Real* both = a.attn.data() + r * 2 * hd;
      std::copy(both, both + hd, q_lin + r * hd);
      std::copy(both + hd, both + 2 * hd, a.gate.data() + r * hd);
    }
  } else {
    ops::linear_forward(a.a.data(), rows, h, w.q, qd, q_lin, sums, threads);
  }
  ops::linear_forward(a.a.data(), rows, h, w.k, kvd, k_lin, sums, threads);
  ops::linear_forward(a.a.data(), rows, h, w.v, kvd, a.v.data(), sums, threads);
  if (s.qkv_bias) {
    ops::bias_forward(q_lin, rows, qd, w.q_bias);
    ops::bias_forward(k_lin, rows, kvd, w.k_bias);
    ops::bias_forward(a.v.data(), rows, kvd, w.v_bias);
  }
  if (s.qk_norm) {
    // Qwen3 normalises each head vector over head_dim, before RoPE.
    ops::rms_norm_forward(q_lin, w.q_norm, rows * s.heads, hd, s.eps, a.q.data(), sums);
    ops::rms_norm_forward(k_lin, w.k_norm, rows * s.kv_heads, hd, s.eps, a.k.data(), sums);
  }
  ops::rope_forward(a.q.data(), rope_shape(s, rows, s.heads), cos, sin, sums);
  ops::rope_forward(a.k.data(), rope_shape(s, rows, s.kv_heads), cos, sin, sums);
  ops::attention_forward(a.q.data(), a.k.data(), a.v.data(), s.attention(rows), doc_offsets,
                         a.attn.data(), a.lse.data(), sums, threads);
  if (s.attention_gate)
    for (size_t i = 0; i < rows * qd; ++i) a.attn[i] *= Real(1) / (Real(1) + std::exp(-a.gate[i]));
  ops::linear_forward(a.attn.data(), rows, qd, w.o, h, out, sums, threads);
  for (size_t i = 0; i < rows * h; ++i) out[i] = x[i] + out[i];
}

template <class Real>
void attention_block_backward(const DecoderLayerShape& s,
                              const AttentionBlockParams<const Real*>& w,
                              const AttentionBlockParams<Real*>& g, const Real* x, size_t rows,
                              std::span<const int32_t> doc_offsets, const Real* cos,
                              const Real* sin, const AttentionBlockActivations<Real>& a,
                              Real* d_residual, BlockGradScratch<Real>& scratch, uint32_t threads) {
  HSRING_REQUIRE(!s.attention_gate);
  const size_t h = s.hidden, qd = s.q_dim(), kvd = s.kv_dim(), hd = s.head_dim;
  ops::grow_to(scratch.d_a, rows * h);
  ops::grow_to(scratch.d_mid, rows * qd);
  for (auto* buffer : {&scratch.d_q, &scratch.d_qn}) ops::grow_to(*buffer, rows * qd);
  for (auto* buffer : {&scratch.d_k, &scratch.d_v, &scratch.d_kn})
    ops::grow_to(*buffer, rows * kvd);
  Real* d_attn = scratch.d_mid.data();
  Real* d_q = scratch.d_q.data();
  Real* d_k = scratch.d_k.data();
  Real* d_v = scratch.d_v.data();

  ops::linear_backward_input(d_residual, rows, h, w.o, qd, d_attn, false, threads);
  ops::linear_backward_weight(d_residual, rows, h, a.attn.data(), qd, g.o, threads);
  ops::attention_backward(a.q.data(), a.k.data(), a.v.data(), a.attn.data(), d_attn, a.lse.data(),
                          s.attention(rows), doc_offsets, d_q, d_k, d_v, threads);
  ops::rope_backward(d_q, rope_shape(s, rows, s.heads), cos, sin);
  ops::rope_backward(d_k, rope_shape(s, rows, s.kv_heads), cos, sin);
  const Real* dq = d_q;
  const Real* dk = d_k;
  if (s.qk_norm) {
    ops::rms_norm_backward(a.q_raw.data(), w.q_norm, d_q, rows * s.heads, hd, s.eps,
                           scratch.d_qn.data(), false, g.q_norm);
    ops::rms_norm_backward(a.k_raw.data(), w.k_norm, d_k, rows * s.kv_heads, hd, s.eps,
                           scratch.d_kn.data(), false, g.k_norm);
    dq = scratch.d_qn.data();
    dk = scratch.d_kn.data();
  }
  if (s.qkv_bias) {
    ops::bias_backward(dq, rows, qd, g.q_bias);
    ops::bias_backward(dk, rows, kvd, g.k_bias);
    ops::bias_backward(d_v, rows, kvd, g.v_bias);
  }
  Real* d_a = scratch.d_a.data();
  ops::linear_backward_input(dq, rows, qd, w.q, h, d_a, false, threads);
  ops::linear_backward_input(dk, rows, kvd, w.k, h, d_a, true, threads);
  ops::linear_backward_input(d_v, rows, kvd, w.v, h, d_a, true, threads);
  ops::linear_backward_weight(dq, rows, qd, a.a.data(), h, g.q, threads);
  ops::linear_backward_weight(dk, rows, kvd, a.a.data(), h, g.k, threads);
  ops::linear_backward_weight(d_v, rows, kvd, a.a.data(), h, g.v, threads);
  ops::rms_norm_backward(x, w.norm, d_a, rows, h, s.eps, d_residual, true, g.norm);
}

template <class Real>
void swiglu_mlp_forward(const Real* x, size_t rows, size_t hidden,
                        const MlpBlockParams<const Real*>& w, size_t width, Real* gate, Real* up,
                        Real* act, Real* out, ops::Sums sums, uint32_t threads) {
  ops::linear_forward(x, rows, hidden, w.gate, width, gate, sums, threads);
  ops::linear_forward(x, rows, hidden, w.up, width, up, sums, threads);
  ops::swiglu_forward(gate, up, rows * width, act, sums);
  ops::linear_forward(act, rows, width, w.down, hidden, out, sums, threads);
}

template <class Real>
void mlp_block_forward(const DecoderLayerShape& s, const MlpBlockParams<const Real*>& w,
                       const Real* x, size_t rows, MlpBlockActivations<Real>& a, Real* out,
                       ops::Sums sums, uint32_t threads) {
  HSRING_REQUIRE(out != x);
  const size_t h = s.hidden, inter = s.intermediate;
  ops::grow_to(a.m, rows * h);
  for (auto* buffer : {&a.gate, &a.up, &a.act}) ops::grow_to(*buffer, rows * inter);
  ops::rms_norm_forward(x, w.norm, rows, h, s.eps, a.m.data(), sums);
  swiglu_mlp_forward(a.m.data(), rows, h, w, inter, a.gate.data(), a.up.data(), a.act.data(), out,
                     sums, threads);
  for (size_t i = 0; i < rows * h; ++i) out[i] = x[i] + out[i];
}

template <class Real>
void mlp_block_backward(const DecoderLayerShape& s, const MlpBlockParams<const Real*>& w,
                        const MlpBlockParams<Real*>& g, const Real* x, size_t rows,
                        const MlpBlockActivations<Real>& a, Real* d_residual,
                        BlockGradScratch<Real>& scratch, uint32_t threads) {
  const size_t h = s.hidden, inter = s.intermediate;
  ops::grow_to(scratch.d_a, rows * h);
  for (auto* buffer : {&scratch.d_mid, &scratch.d_gate, &scratch.d_up})
    ops::grow_to(*buffer, rows * inter);
  Real* d_act = scratch.d_mid.data();
  Real* d_gate = scratch.d_gate.data();
  Real* d_up = scratch.d_up.data();
  Real* d_m = scratch.d_a.data();
  ops::linear_backward_input(d_residual, rows, h, w.down, inter, d_act, false, threads);
  ops::linear_backward_weight(d_residual, rows, h, a.act.data(), inter, g.down, threads);
  ops::swiglu_backward(a.gate.data(), a.up.data(), d_act, rows * inter, d_gate, d_up);
  ops::linear_backward_input(d_gate, rows, inter, w.gate, h, d_m, false, threads);
  ops::linear_backward_input(d_up, rows, inter, w.up, h, d_m, true, threads);
  ops::linear_backward_weight(d_gate, rows, inter, a.m.data(), h, g.gate, threads);
  ops::linear_backward_weight(d_up, rows, inter, a.m.data(), h, g.up, threads);
  ops::rms_norm_backward(x, w.norm, d_m, rows, h, s.eps, d_residual, true, g.norm);
}

#define HSRING_DECODER_LAYER(Real)                                                                 \
  template void attention_block_forward(                                                           \
      const DecoderLayerShape&, const AttentionBlockParams<const Real*>&, const Real*, size_t,     \
      std::span<const int32_t>, const Real*, const Real*, AttentionBlockActivations<Real>&, Real*, \
      ops::Sums, uint32_t);                                                                        \
  template void attention_block_backward(                                                          \
      const DecoderLayerShape&, const AttentionBlockParams<const Real*>&,                          \
      const AttentionBlockParams<Real*>&, const Real*, size_t, std::span<const int32_t>,           \
      const Real*, const Real*, const AttentionBlockActivations<Real>&, Real*,                     \
      BlockGradScratch<Real>&, uint32_t);                                                          \
  template void swiglu_mlp_forward(const Real*, size_t, size_t,                                    \
                                   const MlpBlockParams<const Real*>&, size_t, Real*, Real*,       \
                                   Real*, Real*, ops::Sums, uint32_t);                             \
  template void mlp_block_forward(const DecoderLayerShape&, const MlpBlockParams<const Real*>&,    \
                                  const Real*, size_t, MlpBlockActivations<Real>&, Real*,          \
                                  ops::Sums, uint32_t);                                            \
  template void mlp_block_backward(const DecoderLayerShape&, const MlpBlockParams<const Real*>&,   \
                                   const MlpBlockParams<Real*>&, const Real*, size_t,              \
                                   const MlpBlockActivations<Real>&, Real*,                        \
                                   BlockGradScratch<Real>&, uint32_t);
HSRING_DECODER_LAYER(float)
HSRING_DECODER_LAYER(double)
#undef HSRING_DECODER_LAYER

}  // namespace hsring
