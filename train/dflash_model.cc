#include "train/dflash_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "common/error.h"
#include "common/parallel.h"
#include "model/decoder_layer.h"
#include "ops/argmax.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/scratch.h"
#include "train/dflash_blocks.h"
#include "train/drafter_batch.h"
#include "train/training_numerics.h"

namespace hsring::train {

namespace {

constexpr std::string_view kBatchName = "dflash batch";

[[noreturn]] void bad_batch(const std::string& what) {
  throw Error(Errc::kModel, fmt::format("{}: {}", kBatchName, what));
}

// The document [s, e) holding row t. REQUIRES: valid offsets, t < offsets.back().
std::pair<int64_t, int64_t> document_of(std::span<const int32_t> offsets, int64_t t) {
  const auto next = std::upper_bound(offsets.begin(), offsets.end(), t);
  return {*(next - 1), *next};
}

}  // namespace

void validate_dflash_batch(const DflashBatch& b, const DflashConfig& c) {
  validate_dflash_metadata(b, c);
  validate_batch_features(b, c.feature_dim(), kBatchName);
}

void validate_dflash_metadata(const DflashBatch& b, const DflashConfig& c) {
  // Every DFlash batch embeds its tokens (the blocks' first token), so they are always checked.
  validate_batch_metadata(b, c.vocab_size, /*check_tokens=*/true, kBatchName);
  validate_dflash_anchors(b, c);
}

void validate_dflash_anchors(const DflashBatch& b, const DflashConfig& c) {
  const size_t rows = b.tokens.size();
  for (size_t i = 0; i < b.anchors.size(); ++i) {
    const int64_t a = b.anchors[i];
    if (a < 0 || size_t(a) >= rows)
      bad_batch(fmt::format("anchor {} (row {}) is outside the batch of {} tokens", i, a, rows));
    const auto [s, e] = document_of(b.doc_offsets, a);
    if (!anchor_in_document(a, s, e))
      bad_batch(fmt::format(
          "anchor {} (row {}) of document [{}, {}) needs a context row of its document before it",
          i, a, s, e));
    if (int64_t(b.positions[size_t(a)]) + c.block_size - 1 > std::numeric_limits<int32_t>::max())
      bad_batch(fmt::format("anchor {}'s block positions overflow int32", i));
  }
}

template <class Real>
BasicDflashModel<Real>::BasicDflashModel(DflashConfig config, DflashTargetWeights target,
                                         uint64_t seed, uint32_t threads)
    : ParamStore<Real>(threads), config_(std::move(config)) {
  check_dflash_config(config_);
  this->allocate(dflash_param_layout(config_));
  const auto offset = [this](const std::string& name) { return layout_.at(name).offset; };
  fc_ = offset("fc.weight");
  hidden_norm_ = offset("hidden_norm.weight");
  norm_ = offset("norm.weight");
  at_ = dflash_layer_offsets(layout_, config_.num_layers);
  init_dflash_params<Real>(layout_, seed, params_);
  set_target_weights(target);
}

template <class Real>
void BasicDflashModel<Real>::set_block_size(uint32_t block_size) {
  DflashConfig c = config_;
  c.block_size = block_size;
  check_dflash_config(c);
  config_ = c;
}

template <class Real>
void BasicDflashModel<Real>::set_target_weights(DflashTargetWeights target) {
  const size_t want = size_t(config_.vocab_size) * config_.width();
  for (const auto& [span, name] : {std::pair{target.embed, "embedding"}, {target.lm_head, "head"}})
    if (span.size() != want)
      throw Error(Errc::kModel,
                  fmt::format("dflash: the target's {} holds {} values, [{}, {}] needs {}", name,
                              span.size(), config_.vocab_size, config_.width(), want));
  if constexpr (std::is_same_v<Real, float>) {
    embed_ = target.embed.data();
    head_ = target.lm_head.data();
  } else {
    embed_copy_.assign(target.embed.begin(), target.embed.end());
    head_copy_.assign(target.lm_head.begin(), target.lm_head.end());
    embed_ = embed_copy_.data();
    head_ = head_copy_.data();
  }
}

template <class Real>
const Real* BasicDflashModel<Real>::feature_rows(const DflashBatch& batch) const {
  if constexpr (std::is_same_v<Real, float>) {
    return batch.features.data();
  } else {
    (void)batch;
    return features_.data();  // the forward's double copy
  }
}

template <class Real>
DflashStats BasicDflashModel<Real>::forward(const DflashBatch& batch) {
  return run(batch, false);
}

template <class Real>
DflashStats BasicDflashModel<Real>::forward_backward(const DflashBatch& batch) {
  return run(batch, true);
}

template <class Real>
DflashStats BasicDflashModel<Real>::run(const DflashBatch& batch, bool backward) {
  validate_dflash_batch(batch, config_);
  prepare_blocks(batch);
  if (blocks_ == 0) {
    DflashStats none;
    none.accepted_at.assign(config_.block_size, 0);
    return none;
  }
  run_forward(batch);
  DflashStats stats = run_head(backward);
  if (backward && stats.counted > 0) run_backward(batch);
  return stats;
}

void build_dflash_block_rows(const DflashBatch& batch, const DflashConfig& config,
                             DflashBlockRows& out) {
  const size_t bs = config.block_size, blocks = batch.anchors.size(), rows = blocks * bs;
  out.context.resize(blocks);
  for (auto* v : {&out.tokens, &out.positions, &out.labels}) v->resize(rows);
  out.weights.resize(rows);
  for (size_t b = 0; b < blocks; ++b) {
    const auto a = size_t(batch.anchors[b]);
    const auto [s, e] = document_of(batch.doc_offsets, int64_t(a));
    out.context[b] = {size_t(s), a};  // strictly before the anchor: its own state is not known
    for (size_t j = 0; j < bs; ++j) {
      const size_t r = b * bs + j;
      out.tokens[r] = j == 0 ? batch.tokens[a] : config.mask_token_id;
      out.positions[r] = batch.positions[a] + int32_t(j);
      out.labels[r] = j == 0 ? -1 : dflash_block_label(batch.labels, a, j, size_t(e));
      out.weights[r] = out.labels[r] < 0 ? 0.0 : std::exp(-double(j - 1) / config.loss_gamma);
    }
  }
}

template <class Real>
void BasicDflashModel<Real>::prepare_blocks(const DflashBatch& batch) {
  ctx_rows_ = batch.rows();
  blocks_ = batch.anchors.size();
  rows_ = blocks_ * config_.block_size;
  build_dflash_block_rows(batch, config_, block_rows_);
  predictions_.assign(rows_, -1);
}

template <class Real>
void BasicDflashModel<Real>::run_forward(const DflashBatch& batch) {
  const DflashConfig& c = config_;
  const size_t rows = rows_, ctx_rows = ctx_rows_;
  const size_t fd = c.feature_dim(), d = c.width(), half = c.head_dim / 2;
  const Real* p = params_.data();

  if constexpr (!std::is_same_v<Real, float>)
    features_.assign(batch.features.begin(), batch.features.end());
  for (auto* buffer : {&ctx_pre_, &ctx_}) ops::grow_to(*buffer, ctx_rows * d);
  for (auto* buffer : {&ctx_cos_, &ctx_sin_}) ops::grow_to(*buffer, ctx_rows * half);
  for (auto* buffer : {&block_cos_, &block_sin_}) ops::grow_to(*buffer, rows * half);
  for (auto* buffer : {&x_final_, &final_, &tmp_}) ops::grow_to(*buffer, rows * d);
  acts_.resize(c.num_layers);
  ops::grow_to(acts_[0].x_in, rows * d);

  // The context: every captured row, projected and normalised once for all layers.
  ops::linear_forward(feature_rows(batch), ctx_rows, fd, p + fc_, d, ctx_pre_.data(), kTrainingSums,
                      threads_);
  ops::rms_norm_forward(ctx_pre_.data(), p + hidden_norm_, ctx_rows, d, c.rms_norm_eps, ctx_.data(),
                        kTrainingSums);
  ops::rope_angles(batch.positions, c.head_dim, c.rope_theta, ctx_cos_.data(), ctx_sin_.data());
  ops::rope_angles(std::span<const int32_t>(block_rows_.positions), c.head_dim, c.rope_theta,
                   block_cos_.data(), block_sin_.data());

  // The blocks: the anchor's embedding, then the mask token's.
  ops::embedding_forward(embed_, block_rows_.tokens.data(), rows, d, acts_[0].x_in.data(), false);
  for (size_t layer = 0; layer < c.num_layers; ++layer) layer_forward(layer);
  ops::rms_norm_forward(x_final_.data(), p + norm_, rows, d, c.rms_norm_eps, final_.data(),
                        kTrainingSums);
}

template <class Real>
template <class P>
MlpBlockParams<P> BasicDflashModel<Real>::mlp_params(P base, const DrafterLayerOffsets& o) const {
  return {base + o.post_norm, base + o.gate, base + o.up, base + o.down};
}

template <class Real>
void BasicDflashModel<Real>::layer_forward(size_t layer) {
  const DflashConfig& c = config_;
  const size_t rows = rows_, ctx_rows = ctx_rows_;
  const size_t d = c.width(), qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim;
  const size_t heads = c.num_heads, kv = c.num_kv_heads;
  const double eps = c.rms_norm_eps;
  const Real* p = params_.data();
  const DrafterLayerOffsets& o = at_[layer];
  const uint32_t th = threads_;
  LayerActivations& a = acts_[layer];
  for (auto* buffer : {&a.x_in, &a.h, &a.x_mid}) ops::grow_to(*buffer, rows * d);
  for (auto* buffer : {&a.q_raw, &a.q, &a.attn}) ops::grow_to(*buffer, rows * qd);
  for (auto* buffer : {&a.block_k_raw, &a.block_k, &a.block_v}) ops::grow_to(*buffer, rows * kvd);
  for (auto* buffer : {&a.ctx_k_raw, &a.ctx_k, &a.ctx_v}) ops::grow_to(*buffer, ctx_rows * kvd);
  ops::grow_to(a.lse, rows * heads);
  if (layer + 1 < c.num_layers) ops::grow_to(acts_[layer + 1].x_in, rows * d);
  Real* x_out = layer + 1 < c.num_layers ? acts_[layer + 1].x_in.data() : x_final_.data();

  // Queries of the block rows: per-head RMSNorm before RoPE (Qwen3's QK-norm).
  ops::rms_norm_forward(a.x_in.data(), p + o.input_norm, rows, d, eps, a.h.data(), kTrainingSums);
  ops::linear_forward(a.h.data(), rows, d, p + o.q, qd, a.q_raw.data(), kTrainingSums, th);
  ops::rms_norm_forward(a.q_raw.data(), p + o.q_norm, rows * heads, hd, eps, a.q.data(),
                        kTrainingSums);
  ops::rope_forward(a.q.data(), {rows, heads, hd}, block_cos_.data(), block_sin_.data(),
                    kTrainingSums);
  // Keys and values of [context ; block]: the same projections and k_norm for both; the
  // context is the normalised projection itself, not passed through input_layernorm.
  ops::linear_forward(a.h.data(), rows, d, p + o.k, kvd, a.block_k_raw.data(), kTrainingSums, th);
  ops::rms_norm_forward(a.block_k_raw.data(), p + o.k_norm, rows * kv, hd, eps, a.block_k.data(),
                        kTrainingSums);
  ops::rope_forward(a.block_k.data(), {rows, kv, hd}, block_cos_.data(), block_sin_.data(),
                    kTrainingSums);
  ops::linear_forward(a.h.data(), rows, d, p + o.v, kvd, a.block_v.data(), kTrainingSums, th);
  ops::linear_forward(ctx_.data(), ctx_rows, d, p + o.k, kvd, a.ctx_k_raw.data(), kTrainingSums,
                      th);
  ops::rms_norm_forward(a.ctx_k_raw.data(), p + o.k_norm, ctx_rows * kv, hd, eps, a.ctx_k.data(),
                        kTrainingSums);
  ops::rope_forward(a.ctx_k.data(), {ctx_rows, kv, hd}, ctx_cos_.data(), ctx_sin_.data(),
                    kTrainingSums);
  ops::linear_forward(ctx_.data(), ctx_rows, d, p + o.v, kvd, a.ctx_v.data(), kTrainingSums, th);

  const BlockAttentionShape shape = dflash_attention_shape(c, blocks_, ctx_rows);
  block_attention_forward(a.q.data(), a.ctx_k.data(), a.ctx_v.data(), a.block_k.data(),
                          a.block_v.data(), shape, block_rows_.context, a.attn.data(), a.lse.data(),
                          th);
  ops::linear_forward(a.attn.data(), rows, qd, p + o.o, d, tmp_.data(), kTrainingSums, th);
  for (size_t i = 0; i < rows * d; ++i) a.x_mid[i] = a.x_in[i] + tmp_[i];

  // The MLP block is the target's (model/decoder_layer.h).
  mlp_block_forward(dflash_layer_shape(config_), mlp_params(p, o), a.x_mid.data(), rows, a.mlp,
                    x_out, kTrainingSums, th);
}

template <class Real>
DflashStats BasicDflashModel<Real>::run_head(bool backward) {
  const size_t d = config_.width(), vocab = config_.vocab_size, bs = config_.block_size;
  const size_t scored = blocks_ * (bs - 1);
  const auto row_of = [bs](size_t s) { return s / (bs - 1) * bs + s % (bs - 1) + 1; };
  DflashStats stats;
  stats.blocks = blocks_;
  for (size_t r = 0; r < rows_; ++r) {
    if (block_rows_.labels[r] < 0) continue;
    stats.weight += block_rows_.weights[r];
    ++stats.counted;
  }
  // The gradient of the weighted mean: a counted row weighs w_j / sum(w).
  const double inv_weight = stats.weight > 0 ? 1.0 / stats.weight : 0.0;
  ops::grow_to(head_in_, std::min(scored, kHeadRows) * d);
  ops::grow_to(logits_, std::min(scored, kHeadRows) * vocab);
  if (backward) {
    ops::grow_to(d_head_, std::min(scored, kHeadRows) * d);
    ops::grow_to(d_final_, rows_ * d);
    std::fill(d_final_.begin(), d_final_.begin() + std::ptrdiff_t(rows_ * d), Real(0));
  }
  std::vector<double> row_loss(kHeadRows);
  double loss_sum = 0;
  for (size_t s0 = 0; s0 < scored; s0 += kHeadRows) {
    const size_t n = std::min(kHeadRows, scored - s0);
    for (size_t i = 0; i < n; ++i)
      std::copy_n(final_.data() + row_of(s0 + i) * d, d, head_in_.data() + i * d);
    ops::linear_forward(head_in_.data(), n, d, head_, vocab, logits_.data(), kTrainingSums,
                        threads_);
    // Row by row: each row has its own weight, and its argmax feeds the acceptance.
    const uint32_t use = n * vocab * 8 < (size_t(1) << 16) ? 1u : threads_;
    parallel_for(n, use, 1, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        const size_t r = row_of(s0 + i);
        Real* x = logits_.data() + i * vocab;
        predictions_[r] = ops::argmax(x, vocab);
        row_loss[i] = 0;
        if (block_rows_.labels[r] >= 0) {
          const ops::CrossEntropySums sums =
              ops::cross_entropy(x, &block_rows_.labels[r], 1, vocab,
                                 block_rows_.weights[r] * inv_weight, backward ? x : nullptr, 1);
          row_loss[i] = sums.loss;
        } else if (backward) {
          std::fill(x, x + vocab, Real(0));
        }
      }
    });
    for (size_t i = 0; i < n; ++i) {  // in row order: the same bits for any thread count
      const size_t r = row_of(s0 + i);
      if (block_rows_.labels[r] < 0) continue;
      loss_sum += block_rows_.weights[r] * row_loss[i];
      if (predictions_[r] == block_rows_.labels[r]) ++stats.agreed;
    }
    if (backward) {
      // logits_ now holds d(loss)/d(logits) of these rows; the head itself is frozen.
      ops::linear_backward_input(logits_.data(), n, vocab, head_, d, d_head_.data(), false,
                                 threads_);
      for (size_t i = 0; i < n; ++i)
        std::copy_n(d_head_.data() + i * d, d, d_final_.data() + row_of(s0 + i) * d);
    }
  }
  if (stats.weight > 0) stats.loss = loss_sum / stats.weight;

  stats.accepted_at.assign(bs, 0);
  for (size_t b = 0; b < blocks_; ++b) {
    const size_t first = b * bs + 1;
    const size_t accepted =
        accepted_prefix(std::span<const int32_t>(block_rows_.labels).subspan(first, bs - 1),
                        std::span<const int32_t>(predictions_).subspan(first, bs - 1));
    stats.accepted += accepted;
    for (size_t j = 0; j <= accepted; ++j) ++stats.accepted_at[j];
  }
  stats.acceptance_length = 1.0 + double(stats.accepted) / double(blocks_);
  return stats;
}

template <class Real>
void BasicDflashModel<Real>::run_backward(const DflashBatch& batch) {
  const DflashConfig& c = config_;
  const size_t rows = rows_, ctx_rows = ctx_rows_;
  const size_t fd = c.feature_dim(), d = c.width();
  const double eps = c.rms_norm_eps;
  const Real* p = params_.data();
  Real* g = grads_.data();
  for (auto* buffer : {&d_x_, &d_h_}) ops::grow_to(*buffer, rows * d);
  for (auto* buffer : {&d_ctx_, &d_ctx_pre_}) ops::grow_to(*buffer, ctx_rows * d);
  std::fill(d_ctx_.begin(), d_ctx_.begin() + std::ptrdiff_t(ctx_rows * d), Real(0));

  // d_x_ carries d(loss)/d(residual stream) down the layers; d_ctx_ collects what every
  // layer's context keys and values send to the shared context.
  ops::rms_norm_backward(x_final_.data(), p + norm_, d_final_.data(), rows, d, eps, d_x_.data(),
                         false, g + norm_);
  for (size_t layer = c.num_layers; layer-- > 0;) layer_backward(layer);

  // The block input is the target's embedding and the features are the target's states:
  // both frozen. Only the context projection remains.
  ops::rms_norm_backward(ctx_pre_.data(), p + hidden_norm_, d_ctx_.data(), ctx_rows, d, eps,
                         d_ctx_pre_.data(), false, g + hidden_norm_);
  ops::linear_backward_weight(d_ctx_pre_.data(), ctx_rows, d, feature_rows(batch), fd, g + fc_,
                              threads_);
}

template <class Real>
void BasicDflashModel<Real>::layer_backward(size_t layer) {
  const DflashConfig& c = config_;
  const size_t rows = rows_, ctx_rows = ctx_rows_;
  const size_t d = c.width(), qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim;
  const size_t heads = c.num_heads, kv = c.num_kv_heads;
  const double eps = c.rms_norm_eps;
  const Real* p = params_.data();
  Real* g = grads_.data();
  const DrafterLayerOffsets& o = at_[layer];
  const uint32_t th = threads_;
  const LayerActivations& a = acts_[layer];
  for (auto* buffer : {&d_attn_, &d_q_, &d_q_raw_}) ops::grow_to(*buffer, rows * qd);
  for (auto* buffer : {&d_block_k_, &d_block_k_raw_, &d_block_v_})
    ops::grow_to(*buffer, rows * kvd);
  for (auto* buffer : {&d_ctx_k_, &d_ctx_k_raw_, &d_ctx_v_}) ops::grow_to(*buffer, ctx_rows * kvd);

  // MLP block: x_out = x_mid + down(silu(gate(m)) * up(m)), m = RMSNorm_post(x_mid).
  mlp_block_backward(dflash_layer_shape(config_), mlp_params(p, o), mlp_params(g, o),
                     a.x_mid.data(), rows, a.mlp, d_x_.data(), scratch_, th);

  // Attention block: x_mid = x_in + attn Wo^T.
  ops::linear_backward_input(d_x_.data(), rows, d, p + o.o, qd, d_attn_.data(), false, th);
  ops::linear_backward_weight(d_x_.data(), rows, d, a.attn.data(), qd, g + o.o, th);
  const BlockAttentionShape shape = dflash_attention_shape(c, blocks_, ctx_rows);
  block_attention_backward(a.q.data(), a.ctx_k.data(), a.ctx_v.data(), a.block_k.data(),
                           a.block_v.data(), a.attn.data(), d_attn_.data(), a.lse.data(), shape,
                           block_rows_.context, d_q_.data(), d_ctx_k_.data(), d_ctx_v_.data(),
                           d_block_k_.data(), d_block_v_.data(), th);
  // Undo RoPE, then the per-head norms (k_norm's weight gathers from both key sets).
  ops::rope_backward(d_q_.data(), {rows, heads, hd}, block_cos_.data(), block_sin_.data());
  ops::rms_norm_backward(a.q_raw.data(), p + o.q_norm, d_q_.data(), rows * heads, hd, eps,
                         d_q_raw_.data(), false, g + o.q_norm);
  ops::rope_backward(d_block_k_.data(), {rows, kv, hd}, block_cos_.data(), block_sin_.data());
  ops::rms_norm_backward(a.block_k_raw.data(), p + o.k_norm, d_block_k_.data(), rows * kv, hd, eps,
                         d_block_k_raw_.data(), false, g + o.k_norm);
  ops::rope_backward(d_ctx_k_.data(), {ctx_rows, kv, hd}, ctx_cos_.data(), ctx_sin_.data());
  ops::rms_norm_backward(a.ctx_k_raw.data(), p + o.k_norm, d_ctx_k_.data(), ctx_rows * kv, hd, eps,
                         d_ctx_k_raw_.data(), false, g + o.k_norm);

  // Projections of the block rows (into h) and of the context (into d_ctx_).
  ops::linear_backward_input(d_q_raw_.data(), rows, qd, p + o.q, d, d_h_.data(), false, th);
  ops::linear_backward_input(d_block_k_raw_.data(), rows, kvd, p + o.k, d, d_h_.data(), true, th);
  ops::linear_backward_input(d_block_v_.data(), rows, kvd, p + o.v, d, d_h_.data(), true, th);
  ops::linear_backward_weight(d_q_raw_.data(), rows, qd, a.h.data(), d, g + o.q, th);
  ops::linear_backward_weight(d_block_k_raw_.data(), rows, kvd, a.h.data(), d, g + o.k, th);
  ops::linear_backward_weight(d_ctx_k_raw_.data(), ctx_rows, kvd, ctx_.data(), d, g + o.k, th);
  ops::linear_backward_weight(d_block_v_.data(), rows, kvd, a.h.data(), d, g + o.v, th);
  ops::linear_backward_weight(d_ctx_v_.data(), ctx_rows, kvd, ctx_.data(), d, g + o.v, th);
  ops::linear_backward_input(d_ctx_k_raw_.data(), ctx_rows, kvd, p + o.k, d, d_ctx_.data(), true,
                             th);
  ops::linear_backward_input(d_ctx_v_.data(), ctx_rows, kvd, p + o.v, d, d_ctx_.data(), true, th);
  ops::rms_norm_backward(a.x_in.data(), p + o.input_norm, d_h_.data(), rows, d, eps, d_x_.data(),
                         true, g + o.input_norm);
}

template class BasicDflashModel<float>;
template class BasicDflashModel<double>;

}  // namespace hsring::train
