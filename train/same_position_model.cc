#include "train/same_position_model.h"

#include <algorithm>
#include <type_traits>

#include "common/doc_offsets.h"
#include "common/error.h"
#include "common/parallel.h"
#include "train/layers.h"

namespace hsring::train {

namespace {

// Rows of logits alive at once: bounds the [rows, V] scratch to 256 * V values (155 MB
// for a 151936-token vocabulary in fp32) however long the batch is.
constexpr size_t kHeadRows = 256;

template <class T>
void ensure(std::vector<T>& buffer, size_t size) {
  if (buffer.size() < size) buffer.resize(size);
}

[[noreturn]] void bad_batch(const std::string& what) {
  throw Error(Errc::kModel, "drafter batch: " + what);
}

}  // namespace

void validate_drafter_batch(const DrafterBatch& b, const DrafterConfig& c) {
  const size_t rows = b.tokens.size();
  if (rows > 0 && b.features.size() != rows * size_t(c.feature_dim()))
    bad_batch("features hold " + std::to_string(b.features.size()) + " values, " +
              std::to_string(rows) + " tokens of K*H " + std::to_string(c.feature_dim()) +
              " need " + std::to_string(rows * size_t(c.feature_dim())));
  validate_drafter_metadata(b, c);
}

void validate_drafter_metadata(const DrafterBatch& b, const DrafterConfig& c) {
  const size_t rows = b.tokens.size();
  if (rows == 0) bad_batch("it holds no tokens");
  if (b.positions.size() != rows)
    bad_batch(std::to_string(b.positions.size()) + " positions for " + std::to_string(rows) +
              " tokens");
  if (b.labels.size() != rows)
    bad_batch(std::to_string(b.labels.size()) + " labels for " + std::to_string(rows) + " tokens");
  if (const std::string problem = doc_partition_problem(b.doc_offsets, rows); !problem.empty())
    bad_batch(problem);
  for (size_t t = 0; t < rows; ++t) {
    if (b.positions[t] < 0)
      bad_batch("position " + std::to_string(b.positions[t]) + " of token " + std::to_string(t) +
                " is negative");
    if (b.labels[t] >= int64_t(c.vocab_size))
      bad_batch("label " + std::to_string(b.labels[t]) + " of token " + std::to_string(t) +
                " is outside the vocabulary of " + std::to_string(c.vocab_size) +
                " (negative labels are ignored)");
    if (c.embed_tokens && (b.tokens[t] < 0 || b.tokens[t] >= int64_t(c.vocab_size)))
      bad_batch("token " + std::to_string(b.tokens[t]) + " at " + std::to_string(t) +
                " is outside the vocabulary of " + std::to_string(c.vocab_size));
  }
}

template <class Real>
BasicDrafterModel<Real>::BasicDrafterModel(DrafterConfig config, const DrafterInit& init,
                                           uint32_t threads)
    : ParamStore<Real>(threads), config_(std::move(config)) {
  check_drafter_config(config_);
  this->allocate(drafter_param_layout(config_));
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
  init_drafter_params<Real>(config_, layout_, init, params_);
}

template <class Real>
const Real* BasicDrafterModel<Real>::feature_rows(const DrafterBatch& batch) const {
  if constexpr (std::is_same_v<Real, float>) {
    return batch.features.data();
  } else {
    (void)batch;
    return features_.data();  // the forward's double copy
  }
}

template <class Real>
LossStats BasicDrafterModel<Real>::forward(const DrafterBatch& batch) {
  return run(batch, false);
}

template <class Real>
LossStats BasicDrafterModel<Real>::forward_backward(const DrafterBatch& batch) {
  return run(batch, true);
}

template <class Real>
LossStats BasicDrafterModel<Real>::run(const DrafterBatch& batch, bool backward) {
  validate_drafter_batch(batch, config_);
  run_forward(batch);
  LossStats stats = run_head(batch, backward);
  if (backward) run_backward(batch);
  return stats;
}

template <class Real>
void BasicDrafterModel<Real>::run_forward(const DrafterBatch& batch) {
  const DrafterConfig& c = config_;
  const size_t rows = batch.rows();
  const size_t fd = c.feature_dim(), d = c.width, qd = c.q_dim(), kvd = c.kv_dim();
  const size_t inter = c.intermediate_size, half = c.head_dim / 2;
  const Real* p = params_.data();
  const uint32_t th = threads_;

  if constexpr (!std::is_same_v<Real, float>)
    features_.assign(batch.features.begin(), batch.features.end());
  const Real* features = feature_rows(batch);
  for (auto* buffer : {&x_fc_, &h0_, &a1_, &h1_, &m_, &h2_, &f_}) ensure(*buffer, rows * d);
  for (auto* buffer : {&q_, &attn_}) ensure(*buffer, rows * qd);
  for (auto* buffer : {&k_, &v_}) ensure(*buffer, rows * kvd);
  for (auto* buffer : {&gate_, &up_, &act_}) ensure(*buffer, rows * inter);
  for (auto* buffer : {&cos_, &sin_}) ensure(*buffer, rows * half);
  ensure(lse_, rows * c.num_heads);

  // Input: the projected, normalised captured states (+ the token's embedding).
  linear_forward(features, rows, fd, p + at_.fc, d, x_fc_.data(), th);
  rms_norm_forward(x_fc_.data(), p + at_.hidden_norm, rows, d, c.rms_norm_eps, h0_.data());
  if (c.embed_tokens)
    embedding_forward(p + at_.embed, batch.tokens.data(), rows, d, h0_.data(), true);

  // Attention block. q_ and k_ keep the rotated values: the attention backward needs those.
  rms_norm_forward(h0_.data(), p + at_.input_norm, rows, d, c.rms_norm_eps, a1_.data());
  linear_forward(a1_.data(), rows, d, p + at_.q, qd, q_.data(), th);
  linear_forward(a1_.data(), rows, d, p + at_.k, kvd, k_.data(), th);
  linear_forward(a1_.data(), rows, d, p + at_.v, kvd, v_.data(), th);
  rope_table(batch.positions, c.head_dim, c.rope_theta, cos_.data(), sin_.data());
  rope_forward(q_.data(), rows, c.num_heads, c.head_dim, cos_.data(), sin_.data());
  rope_forward(k_.data(), rows, c.num_kv_heads, c.head_dim, cos_.data(), sin_.data());
  const AttentionShape shape{rows, c.num_heads, c.num_kv_heads, c.head_dim, c.window};
  attention_forward(q_.data(), k_.data(), v_.data(), shape, batch.doc_offsets, attn_.data(),
                    lse_.data(), th);
  linear_forward(attn_.data(), rows, qd, p + at_.o, d, h1_.data(), th);
  for (size_t i = 0; i < rows * d; ++i) h1_[i] += h0_[i];

  // MLP block.
  rms_norm_forward(h1_.data(), p + at_.post_norm, rows, d, c.rms_norm_eps, m_.data());
  linear_forward(m_.data(), rows, d, p + at_.gate, inter, gate_.data(), th);
  linear_forward(m_.data(), rows, d, p + at_.up, inter, up_.data(), th);
  swiglu_forward(gate_.data(), up_.data(), rows * inter, act_.data());
  linear_forward(act_.data(), rows, inter, p + at_.down, d, h2_.data(), th);
  for (size_t i = 0; i < rows * d; ++i) h2_[i] += h1_[i];

  rms_norm_forward(h2_.data(), p + at_.norm, rows, d, c.rms_norm_eps, f_.data());
}

template <class Real>
LossStats BasicDrafterModel<Real>::run_head(const DrafterBatch& batch, bool backward) {
  const size_t rows = batch.rows();
  const size_t d = config_.width, vocab = config_.vocab_size;
  LossStats stats;
  stats.tokens = rows;
  for (int32_t label : batch.labels) stats.counted += label >= 0 ? 1 : 0;
  // The gradient of the mean: every counted row weighs 1 / counted.
  const double grad_scale = stats.counted ? 1.0 / double(stats.counted) : 0.0;
  ensure(logits_, std::min(rows, kHeadRows) * vocab);
  if (backward) ensure(d_f_, rows * d);
  const Real* head = params_.data() + at_.head;
  double loss_sum = 0;
  for (size_t r0 = 0; r0 < rows; r0 += kHeadRows) {
    const size_t n = std::min(kHeadRows, rows - r0);
    linear_forward(f_.data() + r0 * d, n, d, head, vocab, logits_.data(), threads_);
    const CrossEntropySums sums =
        cross_entropy(logits_.data(), batch.labels.data() + r0, n, vocab, grad_scale,
                      backward ? logits_.data() : nullptr, threads_);
    loss_sum += sums.loss;
    stats.agreed += sums.agreed;
    if (backward) {
      // logits_ now holds d(loss)/d(logits) of these rows.
      linear_backward_input(logits_.data(), n, vocab, head, d, d_f_.data() + r0 * d, false,
                            threads_);
      linear_backward_weight(logits_.data(), n, vocab, f_.data() + r0 * d, d,
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
void BasicDrafterModel<Real>::run_backward(const DrafterBatch& batch) {
  const DrafterConfig& c = config_;
  const size_t rows = batch.rows();
  const size_t fd = c.feature_dim(), d = c.width, qd = c.q_dim(), kvd = c.kv_dim();
  const size_t inter = c.intermediate_size;
  const double eps = c.rms_norm_eps;
  const Real* p = params_.data();
  Real* g = grads_.data();
  const uint32_t th = threads_;
  for (auto* buffer : {&d_res_, &d_a_}) ensure(*buffer, rows * d);
  for (auto* buffer : {&d_gate_, &d_up_}) ensure(*buffer, rows * inter);
  ensure(d_act_, rows * std::max(inter, qd));  // d(act), later d(attn)
  ensure(d_q_, rows * qd);
  for (auto* buffer : {&d_k_, &d_v_}) ensure(*buffer, rows * kvd);

  // d_res_ carries d(loss)/d(residual stream) down the layer: h2, then h1, then h0.
  rms_norm_backward(h2_.data(), p + at_.norm, d_f_.data(), rows, d, eps, d_res_.data(), false,
                    g + at_.norm);

  // MLP block.
  linear_backward_input(d_res_.data(), rows, d, p + at_.down, inter, d_act_.data(), false, th);
  linear_backward_weight(d_res_.data(), rows, d, act_.data(), inter, g + at_.down, th);
  swiglu_backward(gate_.data(), up_.data(), d_act_.data(), rows * inter, d_gate_.data(),
                  d_up_.data());
  linear_backward_input(d_gate_.data(), rows, inter, p + at_.gate, d, d_a_.data(), false, th);
  linear_backward_input(d_up_.data(), rows, inter, p + at_.up, d, d_a_.data(), true, th);
  linear_backward_weight(d_gate_.data(), rows, inter, m_.data(), d, g + at_.gate, th);
  linear_backward_weight(d_up_.data(), rows, inter, m_.data(), d, g + at_.up, th);
  rms_norm_backward(h1_.data(), p + at_.post_norm, d_a_.data(), rows, d, eps, d_res_.data(), true,
                    g + at_.post_norm);

  // Attention block.
  Real* d_attn = d_act_.data();
  linear_backward_input(d_res_.data(), rows, d, p + at_.o, qd, d_attn, false, th);
  linear_backward_weight(d_res_.data(), rows, d, attn_.data(), qd, g + at_.o, th);
  const AttentionShape shape{rows, c.num_heads, c.num_kv_heads, c.head_dim, c.window};
  attention_backward(q_.data(), k_.data(), v_.data(), attn_.data(), d_attn, lse_.data(), shape,
                     batch.doc_offsets, d_q_.data(), d_k_.data(), d_v_.data(), th);
  rope_backward(d_q_.data(), rows, c.num_heads, c.head_dim, cos_.data(), sin_.data());
  rope_backward(d_k_.data(), rows, c.num_kv_heads, c.head_dim, cos_.data(), sin_.data());
  linear_backward_input(d_q_.data(), rows, qd, p + at_.q, d, d_a_.data(), false, th);
  linear_backward_input(d_k_.data(), rows, kvd, p + at_.k, d, d_a_.data(), true, th);
  linear_backward_input(d_v_.data(), rows, kvd, p + at_.v, d, d_a_.data(), true, th);
  linear_backward_weight(d_q_.data(), rows, qd, a1_.data(), d, g + at_.q, th);
  linear_backward_weight(d_k_.data(), rows, kvd, a1_.data(), d, g + at_.k, th);
  linear_backward_weight(d_v_.data(), rows, kvd, a1_.data(), d, g + at_.v, th);
  rms_norm_backward(h0_.data(), p + at_.input_norm, d_a_.data(), rows, d, eps, d_res_.data(), true,
                    g + at_.input_norm);

  // Input. The features are the target's: no gradient flows to them.
  if (c.embed_tokens)
    embedding_backward(batch.tokens.data(), d_res_.data(), rows, d, g + at_.embed);
  rms_norm_backward(x_fc_.data(), p + at_.hidden_norm, d_res_.data(), rows, d, eps, d_a_.data(),
                    false, g + at_.hidden_norm);
  linear_backward_weight(d_a_.data(), rows, d, feature_rows(batch), fd, g + at_.fc, th);
}

template class BasicDrafterModel<float>;
template class BasicDrafterModel<double>;

}  // namespace hsring::train
