#include "train/cuda_drafter_layer.h"

#include "common/contract.h"
#include "gpu/cuda_check.h"
#include "gpu/ops/bf16_convert.h"
#include "gpu/ops/gather_rows.h"
#include "gpu/ops/rms_norm.h"
#include "gpu/ops/rope.h"
#include "gpu/ops/swiglu.h"
#include "train/cuda_drafter_kernels.h"
#include "train/cuda_qk_norm_rope.h"

namespace hsring::train {

void forward_into(Gemm& gemm, Operand x, size_t rows, size_t in, const float* w, size_t out,
                  float* y, uint16_t* y_bf16) {
  if (y_bf16)
    gemm.forward(x, rows, in, w, out, y_bf16);
  else
    gemm.forward(x, rows, in, w, out, y);
}

void forward_into(Gemm& gemm, Operand x, size_t rows, size_t in, const float* w, size_t out,
                  Fp32OrBf16& y) {
  forward_into(gemm, x, rows, in, w, out, y.fp32.get(), y.bf16.get());
}

void DrafterLayerActivations::ensure(const DrafterLayerShape& shape, size_t rows, bool mask_rows) {
  const size_t d = shape.layer.hidden, qd = shape.layer.q_dim(), kvd = shape.layer.kv_dim();
  const size_t inter = shape.layer.intermediate;
  x_in.ensure(rows * d);
  if (!mid_in_place) x_mid.ensure(rows * d);
  if (!mask_rows) h.ensure(rows * d, shape.bf16);
  if (shape.layer.qk_norm) {
    q_raw.ensure(rows * qd, shape.bf16);
    k_raw.ensure(rows * kvd, shape.bf16);
  }
  if (shape.bf16_attention) {
    q_bf16.ensure(rows * qd);
    for (auto* buffer : {&k_bf16, &v_bf16}) buffer->ensure(rows * kvd);
  } else {
    q.ensure(rows * qd);
    for (auto* buffer : {&k, &v}) buffer->ensure(rows * kvd);
  }
  attn.ensure(rows * qd, shape.bf16_attention);
  lse.ensure(rows * shape.layer.heads);
  m.ensure(rows * d, shape.bf16);
  for (auto* buffer : {&gate, &up, &act}) buffer->ensure(rows * inter, shape.bf16);
}

void DrafterLayerGradients::ensure(const DrafterLayerShape& shape, size_t rows, size_t scored) {
  const size_t d = shape.layer.hidden, qd = shape.layer.q_dim(), kvd = shape.layer.kv_dim();
  for (auto* buffer : {&d_h, &d_m}) buffer->ensure(rows * d);
  for (auto* buffer : {&d_attn, &d_q}) buffer->ensure(rows * qd);
  if (scored > 0) d_attn_scored.ensure(scored * qd);
  for (auto* buffer : {&d_k, &d_v}) buffer->ensure(rows * kvd);
  d_qkv.ensure(rows * shape.qkv_dim(), shape.bf16);
  for (auto* buffer : {&d_act, &d_gate, &d_up})
    buffer->ensure(rows * shape.layer.intermediate, shape.bf16);
}

DrafterLayerStep::DrafterLayerStep(Gemm& gemm, FlatState& state, cudaStream_t stream,
                                   const DrafterLayerShape& shape, bool bf16_gradients,
                                   float* norm_partials)
    : gemm_(gemm),
      state_(state),
      stream_(stream),
      shape_(shape),
      bf16_gradients_(bf16_gradients),
      norm_partials_(norm_partials) {
  const DecoderLayerShape& c = shape.layer;
  HSRING_REQUIRE(!c.qkv_bias && !c.attention_gate &&
                 (c.rotary_dim == 0 || c.rotary_dim == c.head_dim));
}

// ---- Forward ----

void DrafterLayerStep::attention_inputs_forward(const DrafterLayerOffsets& o,
                                                DrafterLayerActivations& a, size_t rows,
                                                const float* cos, const float* sin,
                                                float* residual_copy,
                                                const MaskRows* mask_rows) const {
  const DecoderLayerShape& c = shape_.layer;
  const size_t d = c.hidden, qd = c.q_dim(), kvd = c.kv_dim();
  const bool qk_norm = c.qk_norm;
  // The projections' outputs: the raw ones QK-norm reads, or (RoPE alone, in place) the
  // attention's inputs themselves. v is the attention's input either way.
  float* q_out = qk_norm ? a.q_raw.fp32.get() : a.q.get();
  uint16_t* q_out_bf16 = qk_norm ? a.q_raw.bf16.get() : nullptr;
  float* k_out = qk_norm ? a.k_raw.fp32.get() : a.k.get();
  uint16_t* k_out_bf16 = qk_norm ? a.k_raw.bf16.get() : nullptr;
  if (mask_rows) {
    // The input norm and the projections of the distinct rows, the latter as one product
    // with [Wq; Wk; Wv] (adjacent in the layout), copied to every row: 1/B of the block
    // rows' q/k/v products.
    const MaskRows& mr = *mask_rows;
    const size_t qkv = shape_.qkv_dim();
    HSRING_CUDA_CHECK(gpu::launch_gather_rows(a.x_in.get(), mr.rows, uint32_t(mr.distinct),
                                              uint32_t(d), mr.x0->get(), stream_));
    norm(mr.x0->get(), p(o.input_norm), mr.distinct, d, *mr.h0);
    forward_into(gemm_, mr.h0->operand(), mr.distinct, d, p(o.q), qkv, *mr.qkv0);
    gather_rows(*mr.qkv0, mr.of_row, rows, qd, q_out, q_out_bf16, 0, qkv);
    gather_rows(*mr.qkv0, mr.of_row, rows, kvd, k_out, k_out_bf16, qd, qkv);
    gather_rows(*mr.qkv0, mr.of_row, rows, kvd, a.v.get(), a.v_bf16.get(), qd + kvd, qkv);
  } else {
    norm(a.x_in.get(), p(o.input_norm), rows, d, a.h, residual_copy);
    forward_into(gemm_, a.h.operand(), rows, d, p(o.q), qd, q_out, q_out_bf16);
    forward_into(gemm_, a.h.operand(), rows, d, p(o.k), kvd, k_out, k_out_bf16);
    forward_into(gemm_, a.h.operand(), rows, d, p(o.v), kvd, a.v.get(), a.v_bf16.get());
  }
  if (qk_norm) {
    qk_norm_rope(a.q_raw, p(o.q_norm), rows, c.heads, cos, sin, a.q.get(), a.q_bf16.get());
    qk_norm_rope(a.k_raw, p(o.k_norm), rows, c.kv_heads, cos, sin, a.k.get(), a.k_bf16.get());
  } else {
    HSRING_CUDA_CHECK(gpu::launch_rope_apply(a.q.get(), uint32_t(rows), c.heads, c.head_dim, cos,
                                             sin, false, stream_));
    HSRING_CUDA_CHECK(gpu::launch_rope_apply(a.k.get(), uint32_t(rows), c.kv_heads, c.head_dim, cos,
                                             sin, false, stream_));
  }
}

size_t DrafterLayerStep::attention_output_forward(const DrafterLayerOffsets& o,
                                                  DrafterLayerActivations& a, size_t rows,
                                                  const ScoredRows* scored) const {
  const size_t d = shape_.layer.hidden, qd = shape_.layer.q_dim();
  size_t n = rows;
  Operand attention = a.attn.operand();
  if (scored) {
    n = scored->count;
    HSRING_CUDA_CHECK(gpu::launch_gather_rows(a.x_in.get(), scored->rows, uint32_t(n), uint32_t(d),
                                              a.x_mid.get(), stream_));
    gather_rows(a.attn, scored->rows, n, qd, a.attn_scored.fp32.get(), a.attn_scored.bf16.get());
    attention = a.attn_scored.operand();
  }
  gemm_.forward(attention, n, qd, p(o.o), d, a.mid(), true);  // x_in + o
  return n;
}

void DrafterLayerStep::mlp_forward(const DrafterLayerOffsets& o, DrafterLayerActivations& a,
                                   size_t n, float* x_out) const {
  const size_t d = shape_.layer.hidden, inter = shape_.layer.intermediate;
  norm(a.mid(), p(o.post_norm), n, d, a.m, x_out);  // x_out = mid, then + down
  forward_into(gemm_, a.m.operand(), n, d, p(o.gate), inter, a.gate);
  forward_into(gemm_, a.m.operand(), n, d, p(o.up), inter, a.up);
  HSRING_CUDA_CHECK(a.gate.bf16.get()
                        ? gpu::launch_swiglu_forward(a.gate.bf16.get(), a.up.bf16.get(), n * inter,
                                                     nullptr, stream_, a.act.bf16.get())
                        : gpu::launch_swiglu_forward(a.gate.fp32.get(), a.up.fp32.get(), n * inter,
                                                     a.act.fp32.get(), stream_));
  gemm_.forward(a.act.operand(), n, inter, p(o.down), d, x_out, true);
}

// ---- Backward ----
// Every gradient below feeds two products (the input's and the weight's), so each is held
// once it is complete; d_x again after each norm adds to it.

void DrafterLayerStep::mlp_backward(const DrafterLayerOffsets& o, const DrafterLayerActivations& a,
                                    size_t n, DrafterLayerGradients& grads,
                                    ResidualGradient d_x) const {
  const size_t d = shape_.layer.hidden, inter = shape_.layer.intermediate;
  gemm_.hold_bf16(d_x.fp32, n * d, d_x.bf16);
  if (grads.d_act.bf16.get())
    gemm_.backward_input(d_x.fp32, n, d, p(o.down), inter, grads.d_act.bf16.get());
  else
    gemm_.backward_input(d_x.fp32, n, d, p(o.down), inter, grads.d_act.fp32.get());
  weight_gradient(d_x.fp32, n, d, a.act.operand(), inter, o.down, false);
  HSRING_CUDA_CHECK(
      a.gate.bf16.get()
          ? gpu::launch_swiglu_backward(a.gate.bf16.get(), a.up.bf16.get(), grads.d_act.bf16.get(),
                                        n * inter, nullptr, nullptr, stream_,
                                        grads.d_gate.bf16.get(), grads.d_up.bf16.get())
          : gpu::launch_swiglu_backward(a.gate.fp32.get(), a.up.fp32.get(), grads.d_act.fp32.get(),
                                        n * inter, grads.d_gate.fp32.get(), grads.d_up.fp32.get(),
                                        stream_));
  gemm_.backward_input(grads.d_gate.operand(), n, inter, p(o.gate), d, grads.d_m.get());
  gemm_.backward_input(grads.d_up.operand(), n, inter, p(o.up), d, grads.d_m.get(), true);
  weight_gradient(grads.d_gate.operand(), n, inter, a.m.operand(), d, o.gate, false);
  weight_gradient(grads.d_up.operand(), n, inter, a.m.operand(), d, o.up, false);
  norm_backward(a.mid(), p(o.post_norm), grads.d_m.get(), n, d, d_x.fp32, true, g(o.post_norm),
                d_x.bf16);
}

ResidualGradient DrafterLayerStep::attention_output_backward(const DrafterLayerOffsets& o,
                                                             const DrafterLayerActivations& a,
                                                             size_t rows, const ScoredRows* scored,
                                                             DrafterLayerGradients& grads,
                                                             ResidualGradient d_x,
                                                             ResidualGradient full) const {
  const size_t d = shape_.layer.hidden, qd = shape_.layer.q_dim();
  const size_t n = scored ? scored->count : rows;
  float* d_attn = scored ? grads.d_attn_scored.get() : grads.d_attn.get();
  gemm_.hold_bf16(d_x.fp32, n * d, d_x.bf16);
  gemm_.backward_input(d_x.fp32, n, d, p(o.o), qd, d_attn);
  weight_gradient(d_x.fp32, n, d, scored ? a.attn_scored.operand() : a.attn.operand(), qd, o.o,
                  false);
  if (!scored) return d_x;
  // Back to every row: an anchor's row takes no gradient from above the attention (its
  // attention output and its residual reach no loss), zeros from the gathers.
  HSRING_CUDA_CHECK(gpu::launch_gather_rows(d_attn, scored->of_row, uint32_t(rows), uint32_t(qd),
                                            grads.d_attn.get(), stream_));
  if (full.fp32)
    HSRING_CUDA_CHECK(gpu::launch_gather_rows(d_x.fp32, scored->of_row, uint32_t(rows), uint32_t(d),
                                              full.fp32, stream_));
  return full;
}

void DrafterLayerStep::rotation_backward(const DrafterLayerOffsets& o,
                                         const DrafterLayerActivations& a, size_t rows,
                                         const float* cos, const float* sin,
                                         DrafterLayerGradients& grads) const {
  const DecoderLayerShape& c = shape_.layer;
  const size_t qd = c.q_dim(), kvd = c.kv_dim(), qkv = shape_.qkv_dim();
  if (c.qk_norm) {
    // Undo RoPE, then the per-head norms, writing into d_qkv's columns.
    qk_norm_rope_backward(a.q_raw, p(o.q_norm), grads.d_q.get(), rows, c.heads, cos, sin,
                          grads.d_qkv, 0, qkv, g(o.q_norm));
    qk_norm_rope_backward(a.k_raw, p(o.k_norm), grads.d_k.get(), rows, c.kv_heads, cos, sin,
                          grads.d_qkv, qd, qkv, g(o.k_norm));
  } else {
    HSRING_CUDA_CHECK(gpu::launch_rope_apply(grads.d_q.get(), uint32_t(rows), c.heads, c.head_dim,
                                             cos, sin, true, stream_));
    HSRING_CUDA_CHECK(gpu::launch_rope_apply(grads.d_k.get(), uint32_t(rows), c.kv_heads,
                                             c.head_dim, cos, sin, true, stream_));
    place_columns(grads.d_q.get(), rows, qd, grads.d_qkv, 0, qkv);
    place_columns(grads.d_k.get(), rows, kvd, grads.d_qkv, qd, qkv);
  }
  place_columns(grads.d_v.get(), rows, kvd, grads.d_qkv, qd + kvd, qkv);
}

void DrafterLayerStep::projections_backward(const DrafterLayerOffsets& o,
                                            const DrafterLayerActivations& a, size_t rows,
                                            const MaskRows* mask_rows, DrafterLayerGradients& grads,
                                            ResidualGradient d_x) const {
  const size_t d = shape_.layer.hidden, qkv = shape_.qkv_dim();
  if (!mask_rows) {
    // d_h = [dq | dk | dv] [Wq; Wk; Wv], and the three weights' gradients as one
    // [q + 2 kv, d] matrix, written.
    gemm_.backward_input(grads.d_qkv.operand(), rows, qkv, p(o.q), d, grads.d_h.get());
    weight_gradient(grads.d_qkv.operand(), rows, qkv, a.h.operand(), d, o.q, false);
    norm_backward(a.x_in.get(), p(o.input_norm), grads.d_h.get(), rows, d, d_x.fp32, true,
                  g(o.input_norm), d_x.bf16);
    return;
  }
  // The mask rows multiply one input: their gradients go in as their sum, one row after the
  // distinct rows' others (the weights' gradient and the input norm's weight's are linear in
  // them). The input's own gradient is not needed: d_m, free here, takes the norm's dx.
  const MaskRows& mr = *mask_rows;
  const size_t others = mr.distinct - 1;
  Fp32OrBf16& d_qkv0 = *mr.d_qkv0;
  gather_rows(grads.d_qkv, mr.rows, others, qkv, d_qkv0.fp32_at(0), d_qkv0.bf16_at(0));
  const auto sum = [&](const auto* values) {
    return launch_sum_rows(values, mr.mask_rows, uint32_t(mr.mask_count), uint32_t(qkv),
                           mr.sum_partials, d_qkv0.fp32_at(others * qkv),
                           d_qkv0.bf16_at(others * qkv), stream_);
  };
  HSRING_CUDA_CHECK(grads.d_qkv.bf16.get() ? sum(grads.d_qkv.bf16.get())
                                           : sum(grads.d_qkv.fp32.get()));
  gemm_.backward_input(d_qkv0.operand(), mr.distinct, qkv, p(o.q), d, mr.d_h0->get());
  weight_gradient(d_qkv0.operand(), mr.distinct, qkv, mr.h0->operand(), d, o.q, false);
  norm_backward(mr.x0->get(), p(o.input_norm), mr.d_h0->get(), mr.distinct, d, grads.d_m.get(),
                false, g(o.input_norm));
}

// ---- Launches ----

void DrafterLayerStep::norm(const float* x, const float* w, size_t rows, size_t dim,
                            float* y) const {
  HSRING_CUDA_CHECK(gpu::launch_rms_norm_forward(x, w, uint32_t(rows), uint32_t(dim),
                                                 shape_.layer.eps, y, stream_));
}

void DrafterLayerStep::norm(const float* x, const float* w, size_t rows, size_t dim, Fp32OrBf16& y,
                            float* x_copy) const {
  HSRING_CUDA_CHECK(gpu::launch_rms_norm_forward(x, w, uint32_t(rows), uint32_t(dim),
                                                 shape_.layer.eps, y.fp32.get(), stream_,
                                                 y.bf16.get(), x_copy));
}

void DrafterLayerStep::norm_backward(const float* x, const float* w, const float* dy, size_t rows,
                                     size_t dim, float* dx, bool accumulate, float* dw,
                                     uint16_t* dx_bf16) const {
  HSRING_CUDA_CHECK(gpu::launch_rms_norm_backward_rows(x, w, dy, uint32_t(rows), uint32_t(dim),
                                                       shape_.layer.eps, dx, accumulate, dw,
                                                       norm_partials_, stream_, dx_bf16));
}

void DrafterLayerStep::qk_norm_rope(const Fp32OrBf16& x, const float* w, size_t rows,
                                    uint32_t heads, const float* cos, const float* sin, float* y,
                                    uint16_t* y_bf16) const {
  const auto run = [&](const auto* values) {
    return launch_qk_norm_rope_forward(values, w, uint32_t(rows), heads, shape_.layer.head_dim,
                                       shape_.layer.eps, cos, sin, y, stream_, y_bf16);
  };
  HSRING_CUDA_CHECK(x.bf16.get() ? run(x.bf16.get()) : run(x.fp32.get()));
}

void DrafterLayerStep::qk_norm_rope_backward(const Fp32OrBf16& x, const float* w, const float* dy,
                                             size_t rows, uint32_t heads, const float* cos,
                                             const float* sin, const Fp32OrBf16& dx, size_t dx_col,
                                             size_t dx_stride, float* dw) const {
  const auto run = [&](const auto* values) {
    return launch_qk_norm_rope_backward(values, w, dy, uint32_t(rows), heads, shape_.layer.head_dim,
                                        shape_.layer.eps, cos, sin, dx.fp32_at(dx_col),
                                        dx.bf16_at(dx_col), dw, stream_, uint32_t(dx_stride));
  };
  HSRING_CUDA_CHECK(x.bf16.get() ? run(x.bf16.get()) : run(x.fp32.get()));
}

void DrafterLayerStep::gather_rows(const Fp32OrBf16& from, const int32_t* index, size_t n,
                                   size_t dim, float* y, uint16_t* y_bf16, size_t col,
                                   size_t stride) const {
  const auto run = [&](const auto* values) {
    return gpu::launch_gather_rows(values + col, index, uint32_t(n), uint32_t(dim), y, stream_,
                                   y_bf16, uint32_t(stride));
  };
  HSRING_CUDA_CHECK(from.bf16.get() ? run(from.bf16.get()) : run(from.fp32.get()));
}

void DrafterLayerStep::place_columns(const float* src, size_t rows, size_t cols,
                                     const Fp32OrBf16& dst, size_t col, size_t stride) const {
  if (dst.bf16.get())
    HSRING_CUDA_CHECK(
        gpu::launch_float_to_bf16_rows(src, rows, cols, dst.bf16.get() + col, stride, stream_));
  else
    HSRING_CUDA_CHECK(cudaMemcpy2DAsync(dst.fp32.get() + col, stride * sizeof(float), src,
                                        cols * sizeof(float), cols * sizeof(float), rows,
                                        cudaMemcpyDeviceToDevice, stream_));
}

void DrafterLayerStep::weight_gradient(Operand dy, size_t rows, size_t out, Operand x, size_t in,
                                       size_t offset, bool accumulate, size_t dy_stride) const {
  if (bf16_gradients_)
    gemm_.backward_weight(dy, rows, out, x, in, state_.grads_bf16(offset), accumulate, dy_stride);
  else
    gemm_.backward_weight(dy, rows, out, x, in, state_.grads(offset), accumulate, dy_stride);
}

}  // namespace hsring::train
