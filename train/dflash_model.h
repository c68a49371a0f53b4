// The DFlash block-diffusion drafter on the CPU: forward, loss and hand-written backward
// over a packed batch of captured target states and a set of anchored draft blocks, every
// parameter and gradient in one flat buffer (docs/drafter-training.md, "The DFlash drafter").
//
//   ctx = RMSNorm_hidden(features fc^T)                          [T, D], shared by all layers
//   block b, anchor a: tokens (tokens[a], mask, ..., mask), positions positions[a] + j
//   x = embed[block tokens]                                      [NB * B, D]
//   per layer:  h = RMSNorm_in(x)
//     q = RoPE(q_norm(h Wq^T)),  k = RoPE(k_norm([ctx ; h] Wk^T)),  v = [ctx ; h] Wv^T
//     (block b's queries see context rows [s, a) of its document and its own B rows)
//     x += Attention(q, k, v) Wo^T;  x += SwiGLU(RMSNorm_post(x))
//   logits = RMSNorm_final(x) lm_head^T
//   loss = sum_{b, j >= 1, counted} w_j CE(logits[b, j], labels[a + j - 1]) / sum of those w_j,
//          w_j = exp(-(j - 1) / gamma)
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "model/decoder_layer.h"
#include "train/block_attention.h"
#include "train/dflash_config.h"
#include "train/dflash_params.h"
#include "train/drafter_batch.h"
#include "train/param_store.h"

namespace hsring::train {

// One packed batch (DrafterBatch: its tokens in [0, V), its labels the greedy next token
// after each row) and its draft blocks; views, not owned.
struct DflashBatch : DrafterBatch {
  std::span<const int32_t> anchors;  // [NB] anchor rows (anchor_in_document)
};

// `batch` with `labels` in place of its own (the step's, built from them), and `anchors`.
inline DflashBatch dflash_batch(const DrafterBatch& batch, std::span<const int32_t> labels,
                                std::span<const int32_t> anchors) {
  DflashBatch blocks{batch, anchors};
  blocks.labels = labels;
  return blocks;
}

// The target's frozen weights the drafter reads, [V, D] each, row-major.
struct DflashTargetWeights {
  std::span<const float> embed;    // input embedding (the block tokens' rows)
  std::span<const float> lm_head;  // output head (the embedding again when tied)
};

struct DflashStats {
  // sum over counted positions of w_j * CE / sum over them of w_j, w_j = exp(-(j - 1) /
  // gamma); counted: block positions j >= 1 whose label (row a + j - 1) is >= 0. 0 when none.
  double loss = 0;
  double weight = 0;     // the denominator, sum of w_j over counted positions
  uint64_t blocks = 0;   // NB
  uint64_t counted = 0;  // counted positions
  uint64_t agreed = 0;   // counted positions whose argmax (first on ties) is the label
  // Teacher-forced acceptance: accepted_prefix of each block, summed; acceptance_length
  // (tau) = 1 + accepted / blocks counts the target's bonus token (0 without blocks).
  uint64_t accepted = 0;
  double acceptance_length = 0;
  // [B]: accepted_at[j] blocks whose positions 1..j all matched; accepted_at[0] = blocks.
  std::vector<uint64_t> accepted_at;
};

// Throws Error(kModel) naming the first problem: mismatched lengths, bad document
// offsets, a negative position, a token outside the vocabulary, a label >= vocab, an
// anchor outside the batch or one without a context row in its document (anchor_in_document).
void validate_dflash_batch(const DflashBatch& batch, const DflashConfig& config);
// The same checks but for the features (a device trainer's features are not on the host).
void validate_dflash_metadata(const DflashBatch& batch, const DflashConfig& config);
// The anchors' checks alone, for a batch whose metadata passed without its anchors.
void validate_dflash_anchors(const DflashBatch& batch, const DflashConfig& config);

// What each row of the batch's draft blocks reads and is scored against, built the same
// way by every device's step: row b * B + j is position j of the block anchored at
// anchors[b].
struct DflashBlockRows {
  std::vector<ContextRange> context;  // [NB]: the block's document rows before its anchor
  std::vector<int32_t> tokens;        // [NB * B]: the anchor's token, then mask_token_id
  std::vector<int32_t> positions;     // [NB * B]: positions[a] + j
  std::vector<int32_t> labels;        // [NB * B]: dflash_block_label(a, j), -1 at j = 0
  std::vector<double> weights;        // [NB * B]: exp(-(j - 1) / gamma), 0 where not counted
};
// REQUIRES: validate_dflash_metadata(batch, config) passed.
void build_dflash_block_rows(const DflashBatch& batch, const DflashConfig& config,
                             DflashBlockRows& rows);

// Real is float for training and double for gradient checks (DflashModel is the float one).
// Thread safety: one forward or backward at a time (the model owns its scratch memory);
// inside one, up to `threads` threads work on disjoint rows or columns. Every result is a
// pure function of the parameters, the target weights and the batch: the same bits for any
// thread count.
template <class Real>
class BasicDflashModel : public ParamStore<Real> {
 public:
  // Parameters from init_dflash_params(seed). The float model reads `target` in place (it
  // must outlive the model or the next set_target_weights); the double one copies it.
  // Throws Error(kModelBadConfig) for an invalid config, Error(kModel) when the
  // embedding or the head is not V * D values. threads 0: every hardware thread.
  BasicDflashModel(DflashConfig config, DflashTargetWeights target, uint64_t seed = 0,
                   uint32_t threads = 1);

  const DflashConfig& config() const { return config_; }
  // Throws Error(kModel) like the constructor.
  void set_target_weights(DflashTargetWeights target);
  // Later forwards use blocks of `block_size` rows: the anchor and block_size - 1 mask rows.
  // For drafting a block cut short by a length limit, as the reference's dflash_generate
  // drafts only the rows it will verify (the block attends to all its rows, so the cut
  // changes every draft); the parameters do not depend on it. Throws Error(kModelBadConfig)
  // for a size validate_dflash_config refuses; then nothing changes.
  void set_block_size(uint32_t block_size);

  // Loss and statistics only. Throws Error(kModel) via validate_dflash_batch.
  DflashStats forward(const DflashBatch& batch);
  // The same, and adds d(loss)/d(params) to grads() (zero_grads() first for the gradient
  // of this batch alone). Nothing flows to the features, the embedding or the head.
  DflashStats forward_backward(const DflashBatch& batch);

  // Of the last forward: the final normalised hidden state of each block row [NB * B, D]
  // (row b * B + j: position j of block b), and each row's argmax token (-1 at j = 0).
  std::span<const Real> block_hidden() const {
    return std::span<const Real>(final_).first(rows_ * config_.width());
  }
  std::span<const int32_t> predictions() const {
    return std::span<const int32_t>(predictions_).first(rows_);
  }

 private:
  // What one layer's backward needs of its forward. x_in is the layer's residual input,
  // x_mid its attention block's output and the input of its MLP block (the target's).
  struct LayerActivations {
    std::vector<Real> x_in, h, q_raw, q, ctx_k_raw, ctx_k, ctx_v, block_k_raw, block_k, block_v,
        attn, x_mid;
    std::vector<double> lse;
    MlpBlockActivations<Real> mlp;
  };

  DflashStats run(const DflashBatch& batch, bool backward);
  void prepare_blocks(const DflashBatch& batch);
  void run_forward(const DflashBatch& batch);
  void layer_forward(size_t layer);
  // The MLP block's tensors of a layer (its shape: dflash_layer_shape).
  template <class P>
  MlpBlockParams<P> mlp_params(P base, const DrafterLayerOffsets& o) const;
  // LM head and weighted cross-entropy over the scored rows in chunks; with `backward` also
  // d(loss)/d(final hidden) into d_final_.
  DflashStats run_head(bool backward);
  void run_backward(const DflashBatch& batch);
  void layer_backward(size_t layer);
  const Real* feature_rows(const DflashBatch& batch) const;

  using ParamStore<Real>::layout_;
  using ParamStore<Real>::threads_;
  using ParamStore<Real>::params_;
  using ParamStore<Real>::grads_;

  DflashConfig config_;
  size_t fc_ = 0, hidden_norm_ = 0, norm_ = 0;
  std::vector<DrafterLayerOffsets> at_;
  // The target's weights: views for float, copies for double.
  const Real* embed_ = nullptr;
  const Real* head_ = nullptr;
  std::vector<Real> embed_copy_, head_copy_;

  // The last forward's blocks: rows_ = NB * B block rows.
  size_t ctx_rows_ = 0, blocks_ = 0, rows_ = 0;
  DflashBlockRows block_rows_;
  std::vector<int32_t> predictions_;
  // Activations kept for the backward.
  std::vector<Real> features_, ctx_pre_, ctx_, ctx_cos_, ctx_sin_, block_cos_, block_sin_;
  std::vector<LayerActivations> acts_;
  std::vector<Real> x_final_, final_, head_in_, logits_, tmp_;
  // Gradient scratch.
  std::vector<Real> d_final_, d_x_, d_h_, d_attn_, d_q_, d_q_raw_, d_block_k_, d_block_k_raw_,
      d_block_v_, d_ctx_k_, d_ctx_k_raw_, d_ctx_v_, d_ctx_, d_ctx_pre_, d_head_;
  BlockGradScratch<Real> scratch_;
};

extern template class BasicDflashModel<float>;
extern template class BasicDflashModel<double>;

using DflashModel = BasicDflashModel<float>;

}  // namespace hsring::train
