// The drafters' decoder layer on the GPU, described once for both CUDA trainers
// (train/cuda_same_position_trainer.h, train/cuda_dflash_trainer.h), as model/decoder_layer.h
// describes it once for the CPU: an attention block and an MLP block, each pre-norm with a
// residual skip, forward and backward over train::Gemm's products and gpu/ops. What differs
// between the trainers is a named variant, not a second copy:
//   - the attention kernel: the caller's, between attention_inputs_forward and
//     attention_output_forward (sliding-window or DFlash block attention over context keys);
//   - the rotation of q and k (DecoderLayerShape::qk_norm): RoPE alone, or Qwen3's QK-norm
//     then RoPE;
//   - the precision of the activations (DrafterLayerShape::bf16): fp32, or bf16 where only
//     products and element-wise kernels read them (the DFlash step in bf16, as autocast);
//   - the rows: every row, or two measured shortcuts of the DFlash step: layer 0's mask rows
//     (MaskRows: one projection of the mask token's row serves every mask row) and the last
//     layer's scored rows (ScoredRows: past the attention, only rows that reach a loss).
//
//   attention block:  h = RMSNorm(x);  q, k, v = h Wq^T, h Wk^T, h Wv^T
//                     q, k = RoPE([RMSNorm_head] q), RoPE([RMSNorm_head] k)
//                     mid = x + Attention(q, k, v) Wo^T
//   MLP block:        m = RMSNorm(mid);  out = mid + (silu(m Wg^T) * m Wu^T) Wd^T
//
// The target's CUDA forward (model/cuda_target_model.cc) is the same layer, described by the
// same DecoderLayerShape, but not this code, and cannot be without slowing one side: its
// weights are resident bf16 (no fp32 master copy to round, no gradient), fused as [Wg | Wu]
// and [Wq | Wk | Wv] matrices that cuBLAS reads through model/cuda_blas.h with a fused QKV
// epilogue (biases, partial rotary, Qwen3.5's output gate: launch_qkv_finish) and keeps no
// activation, while this layer multiplies fp32 master weights (rounded or held in bf16 by
// train::Gemm), keeps every activation its backward reads, and sits a floor above it
// (train/ over model/).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "model/decoder_layer_shape.h"
#include "train/cuda_flat_state.h"
#include "train/cuda_gemm.h"
#include "train/param_layout.h"

namespace hsring::train {

// An array that only products and the element-wise kernels read: fp32 for the fp32
// activations, or bf16, written so by the kernel or product that makes it. Only the
// precision's array is allocated.
struct Fp32OrBf16 {
  Scratch<float> fp32;
  Scratch<uint16_t> bf16;
  void ensure(size_t count, bool in_bf16) {
    if (in_bf16)
      bf16.ensure(count);
    else
      fp32.ensure(count);
  }
  // From element `offset` on: the precision's array, the other null.
  float* fp32_at(size_t offset) const { return fp32.get() ? fp32.get() + offset : nullptr; }
  uint16_t* bf16_at(size_t offset) const { return bf16.get() ? bf16.get() + offset : nullptr; }
  Operand operand(size_t offset = 0) const {
    return bf16.get() ? Operand(bf16.get() + offset) : Operand(fp32.get() + offset);
  }
};

// y [rows, out] = x [rows, in] w^T into y_bf16 when given, else into y.
void forward_into(Gemm& gemm, Operand x, size_t rows, size_t in, const float* w, size_t out,
                  float* y, uint16_t* y_bf16);
// The same into y's array.
void forward_into(Gemm& gemm, Operand x, size_t rows, size_t in, const float* w, size_t out,
                  Fp32OrBf16& y);

// The layer, as model/decoder_layer.h describes it for every drafter and the CPU layers too
// (dflash_layer_shape, same_position_layer_shape), and the step's precision. Of the layer's
// features the step has QK-norm (then RoPE from q_raw, k_raw) or none (RoPE on the
// projections, in place); RoPE over the whole head, no q/k/v biases and no output gate
// (REQUIRES). The attention's window is the caller's kernel's.
struct DrafterLayerShape {
  DecoderLayerShape layer;
  // Activations in bf16 (Fp32OrBf16's), and the attention's inputs in bf16 too when
  // bf16_attention. Both false: everything fp32.
  bool bf16 = false;
  bool bf16_attention = false;

  // The q, k and v projections side by side.
  size_t qkv_dim() const { return layer.q_dim() + 2 * layer.kv_dim(); }
};

// What one layer's backward reads of its forward; x_in is the layer's residual input.
struct DrafterLayerActivations {
  Scratch<float> x_in, x_mid;
  // x_in + o_proj, the post-attention norm's input: x_mid, except when nothing reads x_in
  // after the attention's inputs are made (the DFlash layer 0 below the last, whose mask
  // rows are gathered first), so that o_proj adds into it in place.
  bool mid_in_place = false;
  float* mid() const { return mid_in_place ? x_in.get() : x_mid.get(); }
  Fp32OrBf16 h;             // the input norm's output
  Fp32OrBf16 q_raw, k_raw;  // QK-norm: the projections before the rotation
  // The attention's inputs: fp32 (q, k, v) or bf16 (bf16_attention), only the precision's
  // set allocated. kRope rotates q and k in place.
  Scratch<float> q, k, v;
  Scratch<uint16_t> q_bf16, k_bf16, v_bf16;
  // The attention's output: bf16 for a bf16 attention kernel, else fp32; attn_scored its
  // scored rows (ScoredRows).
  Fp32OrBf16 attn, attn_scored;
  Scratch<float> lse;
  Fp32OrBf16 m, gate, up, act;  // the MLP's: its norm, the two projections, the SwiGLU

  // Grows every array the shape and the rows need: `rows` rows, mask_rows: the inputs' h
  // and raw projections are the MaskRows' own.
  void ensure(const DrafterLayerShape& shape, size_t rows, bool mask_rows);
};

// Gradient scratch, shared by every layer of a step.
struct DrafterLayerGradients {
  Scratch<float> d_h, d_m, d_attn, d_attn_scored, d_q, d_k, d_v;
  // The projections' output gradients side by side, [rows, q + 2 kv]: one product with
  // the adjacent [Wq; Wk; Wv] makes d_h, one their weights' gradient.
  Fp32OrBf16 d_qkv;
  Fp32OrBf16 d_act, d_gate, d_up;
  // `rows` rows, of which `scored` past the last layer's attention (ScoredRows).
  void ensure(const DrafterLayerShape& shape, size_t rows, size_t scored);
};

// The DFlash layer 0's shortcut: its block rows are the anchors' embeddings and, in every
// other row, the mask token's. Its q/k/v projections are made for `distinct` rows (the
// anchors' rows, then one mask row: `rows`), as one product with [Wq; Wk; Wv], and copied
// to every block row (of_row [rows]). Backward, the mask rows' gradients (mask_rows
// [mask_count]) go in as their sum, the last distinct row, since they multiply the same
// input; the input's own gradient is not made (the frozen embedding).
struct MaskRows {
  size_t distinct = 0;
  const int32_t* rows = nullptr;
  const int32_t* of_row = nullptr;
  const int32_t* mask_rows = nullptr;
  size_t mask_count = 0;
  // Scratch: x0, d_h0 [distinct, width]; h0 [distinct, width] and qkv0, d_qkv0
  // [distinct, q + 2 kv] in the activations' precision (qkv0: the attention's);
  // sum_partials [kSumRowChunks * (q + 2 kv)].
  Scratch<float>* x0 = nullptr;
  Scratch<float>* d_h0 = nullptr;
  Fp32OrBf16* h0 = nullptr;
  Fp32OrBf16* qkv0 = nullptr;
  Fp32OrBf16* d_qkv0 = nullptr;
  float* sum_partials = nullptr;
};

// The DFlash last layer's shortcut: past its attention only the scored rows, which the
// final norm and the head read, go on (an anchor's row reaches no loss there: 1/B of the
// layer's o_proj and MLP). rows [count] picks them out of the block rows, of_row [all
// rows] (each row's scored index, or -1) takes their gradients back.
struct ScoredRows {
  size_t count = 0;
  const int32_t* rows = nullptr;
  const int32_t* of_row = nullptr;
};

// d(loss)/d(residual) as a backward carries it down: fp32, and its bf16 copy when the norms'
// backward writes one (bf16 activations), or null.
struct ResidualGradient {
  float* fp32 = nullptr;
  uint16_t* bf16 = nullptr;
};

// The launches and products of one step's layers, bound to its Gemm, weights and gradients
// (FlatState), stream and shape. Every call enqueues on the stream; none synchronises.
class DrafterLayerStep {
 public:
  // bf16_gradients: the matrices' gradients go to FlatState::grads_bf16 (written by the bf16
  // products, as autocast's), else to its fp32 grads(). norm_partials: the width norms'
  // backward scratch, [gpu::kRmsNormBackwardBlocks * width].
  DrafterLayerStep(Gemm& gemm, FlatState& state, cudaStream_t stream,
                   const DrafterLayerShape& shape, bool bf16_gradients, float* norm_partials);

  const DrafterLayerShape& shape() const { return shape_; }
  cudaStream_t stream() const { return stream_; }
  Gemm& gemm() const { return gemm_; }
  float* p(size_t offset) const { return state_.params(offset); }
  float* g(size_t offset) const { return state_.grads(offset); }

  // ---- Forward ----
  // The attention's inputs of `rows` rows from a.x_in: the input norm (its pass also copies
  // x_in into residual_copy when given: the residual o_proj adds to), the q, k, v
  // projections and the rotation, with RoPE tables cos, sin [rows, head_dim / 2]. With
  // mask_rows, the projections of its distinct rows, copied to every row.
  void attention_inputs_forward(const DrafterLayerOffsets& o, DrafterLayerActivations& a,
                                size_t rows, const float* cos, const float* sin,
                                float* residual_copy, const MaskRows* mask_rows) const;
  // mid = x_in + attn Wo^T over `rows` rows, or (scored) over the scored rows, gathered from
  // x_in and attn first. Returns the rows that go on: rows or scored->count.
  size_t attention_output_forward(const DrafterLayerOffsets& o, DrafterLayerActivations& a,
                                  size_t rows, const ScoredRows* scored) const;
  // x_out = mid + MLP(RMSNorm(mid)) over n rows; x_out may not alias mid.
  void mlp_forward(const DrafterLayerOffsets& o, DrafterLayerActivations& a, size_t n,
                   float* x_out) const;

  // ---- Backward, in the reverse order; each weight gradient written, each norm weight's
  // added (zero them first). d_x holds d(out) of n rows on entry and d(mid) on return.
  void mlp_backward(const DrafterLayerOffsets& o, const DrafterLayerActivations& a, size_t n,
                    DrafterLayerGradients& grads, ResidualGradient d_x) const;
  // From d(mid) of n rows: grads.d_attn of `rows` rows for the attention kernel's backward.
  // With scored, the scored rows' gradients go back to every row (an anchor's row takes
  // none from above the attention): d_attn's, and d(mid)'s into `full` (the residual
  // gradient the layers below carry) unless full.fp32 is null. Returns the residual
  // gradient to carry on: d_x, or `full`.
  ResidualGradient attention_output_backward(const DrafterLayerOffsets& o,
                                             const DrafterLayerActivations& a, size_t rows,
                                             const ScoredRows* scored, DrafterLayerGradients& grads,
                                             ResidualGradient d_x, ResidualGradient full) const;
  // From the attention kernel's grads.d_q, d_k, d_v: undoes the rotation and lays the
  // gradients side by side in grads.d_qkv (the rotation norms' weight gradients added).
  void rotation_backward(const DrafterLayerOffsets& o, const DrafterLayerActivations& a,
                         size_t rows, const float* cos, const float* sin,
                         DrafterLayerGradients& grads) const;
  // The projections' products from grads.d_qkv ([Wq; Wk; Wv], their gradient written as one
  // matrix) and the input norm's backward, adding d(x_in) to d_x. With mask_rows, over its
  // distinct rows, and no d(x_in).
  // REQUIRES: projections_adjacent(o, ...).
  void projections_backward(const DrafterLayerOffsets& o, const DrafterLayerActivations& a,
                            size_t rows, const MaskRows* mask_rows, DrafterLayerGradients& grads,
                            ResidualGradient d_x) const;

  // ---- The launches the blocks are made of, for a trainer's own parts (its input and
  // head, DFlash's context keys) ----
  void norm(const float* x, const float* w, size_t rows, size_t dim, float* y) const;
  // Into y's array; x_copy, when given, receives x (a residual, copied on the norm's pass).
  void norm(const float* x, const float* w, size_t rows, size_t dim, Fp32OrBf16& y,
            float* x_copy = nullptr) const;
  // dx of RMSNorm(x) from dy, written or added, into dx, dx_bf16 (for the products that
  // read it) or both; the weight's gradient added to dw. One pass.
  void norm_backward(const float* x, const float* w, const float* dy, size_t rows, size_t dim,
                     float* dx, bool accumulate, float* dw, uint16_t* dx_bf16 = nullptr) const;
  // Qwen3's per-head norm, then RoPE: y = RoPE(RMSNorm(x) w) over x [rows, heads * hd] in
  // x's array, into y (fp32) or y_bf16, whichever is not null.
  void qk_norm_rope(const Fp32OrBf16& x, const float* w, size_t rows, uint32_t heads,
                    const float* cos, const float* sin, float* y, uint16_t* y_bf16) const;
  // Its backward from dy: dx into dx's columns from dx_col on (its rows dx_stride apart); the
  // weight's gradient added to dw.
  void qk_norm_rope_backward(const Fp32OrBf16& x, const float* w, const float* dy, size_t rows,
                             uint32_t heads, const float* cos, const float* sin,
                             const Fp32OrBf16& dx, size_t dx_col, size_t dx_stride,
                             float* dw) const;
  // Rows index[0..n) of `from`'s columns [col, col + dim) (its rows `stride` apart; 0: dim)
  // into y (fp32) or y_bf16, whichever is not null (a negative index: zeros).
  void gather_rows(const Fp32OrBf16& from, const int32_t* index, size_t n, size_t dim, float* y,
                   uint16_t* y_bf16, size_t col = 0, size_t stride = 0) const;
  // src [rows, cols] into dst's columns from `col` on, its rows `stride` apart, in dst's
  // precision (bf16: rounded).
  void place_columns(const float* src, size_t rows, size_t cols, const Fp32OrBf16& dst, size_t col,
                     size_t stride) const;
  // The gradient of the matrix at `offset`, dy^T x, written or added: bf16 with
  // bf16_gradients, else fp32.
  void weight_gradient(Operand dy, size_t rows, size_t out, Operand x, size_t in, size_t offset,
                       bool accumulate, size_t dy_stride = 0) const;

 private:
  Gemm& gemm_;
  FlatState& state_;
  cudaStream_t stream_;
  DrafterLayerShape shape_;
  bool bf16_gradients_;
  float* norm_partials_;
};

}  // namespace hsring::train
