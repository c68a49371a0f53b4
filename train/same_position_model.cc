#include "train/same_position_model.h"

#include <algorithm>
#include <string_view>
#include <type_traits>

#include "common/parallel.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/scratch.h"
#include "train/training_numerics.h"

namespace hsring::train {

namespace {

constexpr std::string_view kBatchName = "drafter batch";

}  // namespace

void validate_drafter_batch(const DrafterBatch& b, const SamePositionConfig& c) {
  validate_batch_features(b, c.feature_dim(), kBatchName);
  validate_drafter_metadata(b, c);
}

// Tokens are read only to embed them, so only then are they checked.
void validate_drafter_metadata(const DrafterBatch& b, const SamePositionConfig& c) {
  validate_batch_metadata(b, c.vocab_size, c.embed_tokens, kBatchName);
}

template <class Real>
BasicSamePositionModel<Real>::BasicSamePositionModel(SamePositionConfig config,
                                                     const SamePositionInit& init, uint32_t threads)
    : ParamStore<Real>(threads), config_(std::move(config)) {
  check_same_position_config(config_);
  this->allocate(same_position_param_layout(config_));
  const auto offset = [this](const char* name) { return layout_.at(name).offset; };
  if (config_.embed_tokens) at_.embed = offset("embed_tokens.weight");
  at_.fc = offset("fc.weight");
  at_.hidden_norm = offset("hidden_norm.weight");
  at_.input_norm = offset("layers.0.input_layernorm.weight");
  at_.q = offset("layers.0.self_attn.q_proj.weight");
  at_.k = offset("layers.0.self_attn.k_proj.weight");
  at_.v = offset("layers.0.self_attn.v_proj.weight");
  at_.o = offset("layers.0.self_attn.o_proj.weight");
  at_.post_norm = offset("layers.0.post_attention_layernorm.weight");
  at_.gate = offset("layers.0.mlp.gate_proj.weight");
  at_.up = offset("layers.0.mlp.up_proj.weight");
  at_.down = offset("layers.0.mlp.down_proj.weight");
  at_.norm = offset("norm.weight");
  at_.head = offset("lm_head.weight");
  shape_ = same_position_layer_shape(config_);
  init_same_position_params<Real>(config_, layout_, init, params_);
}

template <class Real>
const Real* BasicSamePositionModel<Real>::feature_rows(const DrafterBatch& batch) const {
  if constexpr (std::is_same_v<Real, float>) {
    return batch.features.data();
  } else {
    (void)batch;
    return features_.data();  // the forward's double copy
  }
}

template <class Real>
LossStats BasicSamePositionModel<Real>::forward(const DrafterBatch& batch) {
  return run(batch, false);
}

template <class Real>
LossStats BasicSamePositionModel<Real>::forward_backward(const DrafterBatch& batch) {
  return run(batch, true);
}

template <class Real>
LossStats BasicSamePositionModel<Real>::run(const DrafterBatch& batch, bool backward) {
  validate_drafter_batch(batch, config_);
  run_forward(batch);
  LossStats stats = run_head(batch, backward);
  if (backward) run_backward(batch);
  return stats;
}

template <class Real>
template <class P>
AttentionBlockParams<P> BasicSamePositionModel<Real>::attention_params(P base) const {
  AttentionBlockParams<P> w;
  w.norm = base + at_.input_norm;
  w.q = base + at_.q;
  w.k = base + at_.k;
  w.v = base + at_.v;
  w.o = base + at_.o;
  return w;
}

template <class Real>
template <class P>
MlpBlockParams<P> BasicSamePositionModel<Real>::mlp_params(P base) const {
  return {base + at_.post_norm, base + at_.gate, base + at_.up, base + at_.down};
}

template <class Real>
void BasicSamePositionModel<Real>::run_forward(const DrafterBatch& batch) {
  const SamePositionConfig& c = config_;
  const size_t rows = batch.rows();
  const size_t fd = c.feature_dim(), d = c.width, half = c.head_dim / 2;
  const Real* p = params_.data();
  const uint32_t th = threads_;

  if constexpr (!std::is_same_v<Real, float>)
    features_.assign(batch.features.begin(), batch.features.end());
  const Real* features = feature_rows(batch);
  for (auto* buffer : {&x_fc_, &h0_, &h1_, &h2_, &f_}) ops::grow_to(*buffer, rows * d);
  for (auto* buffer : {&cos_, &sin_}) ops::grow_to(*buffer, rows * half);

  // Input: the projected, normalised captured states (+ the token's embedding).
  ops::linear_forward(features, rows, fd, p + at_.fc, d, x_fc_.data(), kTrainingSums, th);
  ops::rms_norm_forward(x_fc_.data(), p + at_.hidden_norm, rows, d, c.rms_norm_eps, h0_.data(),
                        kTrainingSums);
  if (c.embed_tokens)
    ops::embedding_forward(p + at_.embed, batch.tokens.data(), rows, d, h0_.data(), true);

  // The decoder layer (model/decoder_layer.h), then the final norm.
  ops::rope_angles(batch.positions, c.head_dim, c.rope_theta, cos_.data(), sin_.data());
  attention_block_forward(shape_, attention_params(p), h0_.data(), rows, batch.doc_offsets,
                          cos_.data(), sin_.data(), attention_, h1_.data(), kTrainingSums, th);
  mlp_block_forward(shape_, mlp_params(p), h1_.data(), rows, mlp_, h2_.data(), kTrainingSums, th);
  ops::rms_norm_forward(h2_.data(), p + at_.norm, rows, d, c.rms_norm_eps, f_.data(),
                        kTrainingSums);
}

template <class Real>
LossStats BasicSamePositionModel<Real>::run_head(const DrafterBatch& batch, bool backward) {
  const size_t rows = batch.rows();
  const size_t d = config_.width, vocab = config_.vocab_size;
  LossStats stats;
  stats.tokens = rows;
  for (int32_t label : batch.labels) stats.counted += label >= 0 ? 1 : 0;
  // The gradient of the mean: every counted row weighs 1 / counted.
  const double grad_scale = stats.counted ? 1.0 / double(stats.counted) : 0.0;
  ops::grow_to(logits_, std::min(rows, kHeadRows) * vocab);
  if (backward) ops::grow_to(d_f_, rows * d);
  const Real* head = params_.data() + at_.head;
  double loss_sum = 0;
  for (size_t r0 = 0; r0 < rows; r0 += kHeadRows) {
    const size_t n = std::min(kHeadRows, rows - r0);
    ops::linear_forward(f_.data() + r0 * d, n, d, head, vocab, logits_.data(), kTrainingSums,
                        threads_);
    const ops::CrossEntropySums sums =
        ops::cross_entropy(logits_.data(), batch.labels.data() + r0, n, vocab, grad_scale,
                           backward ? logits_.data() : nullptr, threads_);
    loss_sum += sums.loss;
    stats.agreed += sums.agreed;
    if (backward) {
      // logits_ now holds d(loss)/d(logits) of these rows.
      ops::linear_backward_input(logits_.data(), n, vocab, head, d, d_f_.data() + r0 * d, false,
                                 threads_);
      ops::linear_backward_weight(logits_.data(), n, vocab, f_.data() + r0 * d, d,
                                  grads_.data() + at_.head, threads_);
    }
  }
  if (stats.counted) {
    stats.loss = loss_sum / double(stats.counted);
    stats.agreement = double(stats.agreed) / double(stats.counted);
  }
  return stats;
}

template <class Real>
void BasicSamePositionModel<Real>::run_backward(const DrafterBatch& batch) {
  const SamePositionConfig& c = config_;
  const size_t rows = batch.rows();
  const size_t fd = c.feature_dim(), d = c.width;
  const double eps = c.rms_norm_eps;
  const Real* p = params_.data();
  Real* g = grads_.data();
  const uint32_t th = threads_;
  for (auto* buffer : {&d_res_, &d_a_}) ops::grow_to(*buffer, rows * d);

  // d_res_ carries d(loss)/d(residual stream) down the layer: h2, then h1, then h0.
  ops::rms_norm_backward(h2_.data(), p + at_.norm, d_f_.data(), rows, d, eps, d_res_.data(), false,
                         g + at_.norm);
  mlp_block_backward(shape_, mlp_params(p), mlp_params(g), h1_.data(), rows, mlp_, d_res_.data(),
                     scratch_, th);
  attention_block_backward(shape_, attention_params(p), attention_params(g), h0_.data(), rows,
                           batch.doc_offsets, cos_.data(), sin_.data(), attention_, d_res_.data(),
                           scratch_, th);

  // Input. The features are the target's: no gradient flows to them.
  if (c.embed_tokens)
    ops::embedding_backward(batch.tokens.data(), d_res_.data(), rows, d, g + at_.embed);
  ops::rms_norm_backward(x_fc_.data(), p + at_.hidden_norm, d_res_.data(), rows, d, eps,
                         d_a_.data(), false, g + at_.hidden_norm);
  ops::linear_backward_weight(d_a_.data(), rows, d, feature_rows(batch), fd, g + at_.fc, th);
}

template class BasicSamePositionModel<float>;
template class BasicSamePositionModel<double>;

}  // namespace hsring::train
