// The same-position drafter on the CPU (the DFlash drafter is train/dflash_model.h):
// forward, loss and hand-written backward over a packed batch of captured target states,
// with every parameter and gradient in one flat buffer.
//
//   x  = RMSNorm(features fc^T) [+ embed_tokens[token]]       features: [T, K*H]
//   x += Attention(RoPE(q), RoPE(k), v) Wo^T                    q, k, v from RMSNorm(x)
//        (causal within a document and within a sliding window)
//   x += (silu(m Wg^T) * m Wu^T) Wd^T,  m = RMSNorm(x)
//   logits = RMSNorm(x) lm_head^T;  loss = mean cross-entropy over counted labels
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/ignore_label.h"
#include "model/decoder_layer.h"
#include "train/drafter_batch.h"
#include "train/loss_stats.h"
#include "train/param_store.h"
#include "train/same_position_config.h"
#include "train/same_position_params.h"

namespace hsring::train {

// Throws Error(kModel) naming the first problem: an empty batch, mismatched lengths,
// bad document offsets, a negative position, a label >= vocab, a token outside the
// vocabulary (with embed_tokens).
void validate_drafter_batch(const DrafterBatch& batch, const SamePositionConfig& config);
// The same without the features (a batch whose features are elsewhere, on a GPU).
void validate_drafter_metadata(const DrafterBatch& batch, const SamePositionConfig& config);

// Real is float for training and double for gradient checks (SamePositionModel is the float one).
// Thread safety: one forward or backward at a time (the model owns its scratch memory);
// inside one, up to `threads` threads work on disjoint rows or columns. Every result is a
// pure function of the parameters and the batch: the same bits for any thread count.
template <class Real>
class BasicSamePositionModel : public ParamStore<Real> {
 public:
  // Throws Error(kModelBadConfig) for an invalid config, Error(kModel) for an
  // lm_head init of the wrong size. threads 0: every hardware thread.
  explicit BasicSamePositionModel(SamePositionConfig config, const SamePositionInit& init = {},
                                  uint32_t threads = 1);

  const SamePositionConfig& config() const { return config_; }

  // Loss and agreement only. Throws Error(kModel) via validate_drafter_batch.
  LossStats forward(const DrafterBatch& batch);
  // Loss and agreement, and adds d(loss)/d(params) to grads() (zero_grads() first for the
  // gradient of this batch alone). The loss is the mean over this batch's counted positions.
  LossStats forward_backward(const DrafterBatch& batch);

 private:
  struct Offsets {
    size_t embed = 0, fc = 0, hidden_norm = 0, input_norm = 0, q = 0, k = 0, v = 0, o = 0,
           post_norm = 0, gate = 0, up = 0, down = 0, norm = 0, head = 0;
  };

  LossStats run(const DrafterBatch& batch, bool backward);
  void run_forward(const DrafterBatch& batch);
  template <class P>
  AttentionBlockParams<P> attention_params(P base) const;
  template <class P>
  MlpBlockParams<P> mlp_params(P base) const;
  // LM head and cross-entropy in chunks of rows; with `backward`, also df and d(lm_head).
  LossStats run_head(const DrafterBatch& batch, bool backward);
  void run_backward(const DrafterBatch& batch);
  // The batch's features as Real: the batch's own (float) or the forward's copy (double).
  const Real* feature_rows(const DrafterBatch& batch) const;

  using ParamStore<Real>::layout_;
  using ParamStore<Real>::threads_;
  using ParamStore<Real>::params_;
  using ParamStore<Real>::grads_;

  SamePositionConfig config_;
  DecoderLayerShape shape_;  // its one layer: no QK-norm, a sliding window
  Offsets at_;
  // Activations of the last forward [T, *], kept for the backward, and gradient scratch.
  std::vector<Real> features_, x_fc_, h0_, h1_, h2_, f_, logits_, cos_, sin_;
  AttentionBlockActivations<Real> attention_;
  MlpBlockActivations<Real> mlp_;
  std::vector<Real> d_f_, d_res_, d_a_;
  BlockGradScratch<Real> scratch_;
};

extern template class BasicSamePositionModel<float>;
extern template class BasicSamePositionModel<double>;

using SamePositionModel = BasicSamePositionModel<float>;

}  // namespace hsring::train
