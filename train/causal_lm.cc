#include "train/causal_lm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/contract.h"
#include "common/doc_offsets.h"
#include "common/error.h"
#include "common/parallel.h"
#include "ops/argmax.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/scratch.h"
#include "train/training_numerics.h"

namespace hsring::train {

namespace {

// The embedding's standard deviation at initialisation (HF's initializer_range): with a
// tied head the first logits then have a spread of about 0.02 * sqrt(H), nearly uniform.
constexpr double kEmbedStd = 0.02;

[[noreturn]] void bad_batch(const std::string& what) {
  throw Error(Errc::kModel, "causal LM batch: " + what);
}

std::string layer_name(size_t i, const char* rest) {
  return fmt::format("model.layers.{}.{}", i, rest);
}

}  // namespace

void validate_causal_lm_batch(const CausalLmBatch& b, const ModelConfig& c) {
  const size_t rows = b.tokens.size();
  if (rows == 0) bad_batch("it holds no tokens");
  if (b.positions.size() != rows || b.labels.size() != rows)
    bad_batch(fmt::format("{} positions and {} labels for {} tokens", b.positions.size(),
                          b.labels.size(), rows));
  if (const std::string problem = doc_partition_problem(b.doc_offsets, rows); !problem.empty())
    bad_batch(problem);
  const int64_t vocab = c.vocab_size;
  for (size_t t = 0; t < rows; ++t) {
    if (b.positions[t] < 0) bad_batch(fmt::format("position of token {} is negative", t));
    if (b.tokens[t] < 0 || b.tokens[t] >= vocab)
      bad_batch(
          fmt::format("token {} at {} is outside the vocabulary of {}", b.tokens[t], t, vocab));
    if (b.labels[t] >= vocab)
      bad_batch(
          fmt::format("label {} at {} is outside the vocabulary of {}", b.labels[t], t, vocab));
  }
}

ParamLayout causal_lm_layout(const ModelConfig& c) {
  HSRING_REQUIRE(validate_config(c).empty());
  ParamLayout layout;
  const int64_t h = c.hidden_size, v = c.vocab_size, inter = c.intermediate_size;
  const int64_t q = c.q_dim(), kv = c.kv_dim(), hd = c.head_dim;
  layout.add("model.embed_tokens.weight", {v, h});
  for (size_t i = 0; i < c.num_layers; ++i) {
    layout.add(layer_name(i, "input_layernorm.weight"), {h});
    layout.add(layer_name(i, "self_attn.q_proj.weight"), {q, h});
    layout.add(layer_name(i, "self_attn.k_proj.weight"), {kv, h});
    layout.add(layer_name(i, "self_attn.v_proj.weight"), {kv, h});
    layout.add(layer_name(i, "self_attn.o_proj.weight"), {h, q});
    if (c.qk_norm) {
      layout.add(layer_name(i, "self_attn.q_norm.weight"), {hd});
      layout.add(layer_name(i, "self_attn.k_norm.weight"), {hd});
    }
    layout.add(layer_name(i, "post_attention_layernorm.weight"), {h});
    layout.add(layer_name(i, "mlp.gate_proj.weight"), {inter, h});
    layout.add(layer_name(i, "mlp.up_proj.weight"), {inter, h});
    layout.add(layer_name(i, "mlp.down_proj.weight"), {h, inter});
  }
  layout.add("model.norm.weight", {h});
  if (!c.tie_embeddings) layout.add("lm_head.weight", {v, h});
  return layout;
}

ModelWeights causal_lm_weights(const ModelConfig& config, const ParamLayout& layout,
                               std::span<const float> params) {
  if (params.size() != layout.total)
    throw Error(Errc::kModel, fmt::format("causal LM parameters: {} values, {} expected",
                                          params.size(), layout.total));
  ModelWeights weights;
  for (const WeightTensor& t : weight_tensors(config, weights)) {
    const ParamInfo& p = layout.at(t.name);
    if (p.size != t.data->size())
      throw Error(Errc::kModel, fmt::format("tensor '{}' has {} values, the model {}", t.name,
                                            p.size, t.data->size()));
    std::copy_n(params.begin() + std::ptrdiff_t(p.offset), p.size, t.data->begin());
  }
  return weights;
}

template <class Real>
BasicCausalLm<Real>::BasicCausalLm(ModelConfig config, uint64_t seed, uint32_t threads)
    : ParamStore<Real>(threads), config_(std::move(config)) {
  if (std::string why = validate_config(config_); !why.empty())
    throw Error(Errc::kModelBadConfig, "causal LM '" + config_.name + "': " + why);
  shape_ = decoder_layer_shape(config_);
  // causal_lm_layout has no q/k/v biases and no attention gate: the layer trains without.
  shape_.qkv_bias = false;
  shape_.attention_gate = false;
  this->allocate(causal_lm_layout(config_));
  const auto offset = [this](const std::string& name) { return layout_.at(name).offset; };
  embed_ = offset("model.embed_tokens.weight");
  norm_ = offset("model.norm.weight");
  head_ = config_.tie_embeddings ? embed_ : offset("lm_head.weight");
  for (size_t i = 0; i < config_.num_layers; ++i) {
    LayerOffsets o;
    o.input_norm = offset(layer_name(i, "input_layernorm.weight"));
    o.q = offset(layer_name(i, "self_attn.q_proj.weight"));
    o.k = offset(layer_name(i, "self_attn.k_proj.weight"));
    o.v = offset(layer_name(i, "self_attn.v_proj.weight"));
    o.o = offset(layer_name(i, "self_attn.o_proj.weight"));
    if (config_.qk_norm) {
      o.q_norm = offset(layer_name(i, "self_attn.q_norm.weight"));
      o.k_norm = offset(layer_name(i, "self_attn.k_norm.weight"));
    }
    o.post_norm = offset(layer_name(i, "post_attention_layernorm.weight"));
    o.gate = offset(layer_name(i, "mlp.gate_proj.weight"));
    o.up = offset(layer_name(i, "mlp.up_proj.weight"));
    o.down = offset(layer_name(i, "mlp.down_proj.weight"));
    at_.push_back(o);
  }
  for (const ParamInfo& t : layout_.tensors) {
    Real* data = params_.data() + t.offset;
    if (t.name == "model.embed_tokens.weight" || t.name == "lm_head.weight") {
      const RandomFill fill = random_fill(WeightSpec{t.name, t.shape}, seed);
      const double scale = kEmbedStd * std::sqrt(3.0);  // U[-1, 1) has variance 1/3
      for (size_t i = 0; i < t.size; ++i)
        data[i] = Real(scale * double(random_uniform(fill.key, i)));
    } else {
      init_param_tensor<Real>(t, seed, data);
    }
  }
  residual_.resize(config_.num_layers + 1);
  acts_.resize(config_.num_layers);
}

template <class Real>
std::span<const Real> BasicCausalLm<Real>::layer_output(size_t layer) const {
  if (layer >= config_.num_layers)
    throw Error(Errc::kModel, fmt::format("causal LM: no layer {}", layer));
  return std::span<const Real>(residual_[layer + 1]).first(rows_ * config_.hidden_size);
}

template <class Real>
LossStats BasicCausalLm<Real>::forward(const CausalLmBatch& batch) {
  return run(batch, false);
}

template <class Real>
LossStats BasicCausalLm<Real>::forward_backward(const CausalLmBatch& batch) {
  return run(batch, true);
}

template <class Real>
template <class P>
AttentionBlockParams<P> BasicCausalLm<Real>::attention_params(P base, const LayerOffsets& o) const {
  AttentionBlockParams<P> w;
  w.norm = base + o.input_norm;
  w.q = base + o.q;
  w.k = base + o.k;
  w.v = base + o.v;
  w.o = base + o.o;
  if (config_.qk_norm) {
    w.q_norm = base + o.q_norm;
    w.k_norm = base + o.k_norm;
  }
  return w;
}

template <class Real>
template <class P>
MlpBlockParams<P> BasicCausalLm<Real>::mlp_params(P base, const LayerOffsets& o) const {
  return {base + o.post_norm, base + o.gate, base + o.up, base + o.down};
}

template <class Real>
LossStats BasicCausalLm<Real>::run(const CausalLmBatch& batch, bool backward) {
  validate_causal_lm_batch(batch, config_);
  const size_t rows = batch.rows(), h = config_.hidden_size, rope_dim = config_.rope_dim();
  rows_ = rows;
  ops::grow_to(residual_[0], rows * h);
  ops::embedding_forward(params_.data() + embed_, batch.tokens.data(), rows, h, residual_[0].data(),
                         false);
  ops::grow_to(cos_, rows * rope_dim / 2);
  ops::grow_to(sin_, rows * rope_dim / 2);
  ops::rope_angles(batch.positions, rope_dim, config_.rope_theta, cos_.data(), sin_.data());
  for (size_t l = 0; l < config_.num_layers; ++l) run_layer(l, batch);
  LossStats stats = run_head(batch, backward);
  if (backward) run_backward(batch);
  return stats;
}

template <class Real>
void BasicCausalLm<Real>::run_layer(size_t index, const CausalLmBatch& batch) {
  const size_t rows = batch.rows(), h = config_.hidden_size;
  const Real* p = params_.data();
  LayerActivations& a = acts_[index];
  ops::grow_to(a.mid, rows * h);
  ops::grow_to(residual_[index + 1], rows * h);
  attention_block_forward(shape_, attention_params(p, at_[index]), residual_[index].data(), rows,
                          batch.doc_offsets, cos_.data(), sin_.data(), a.attention, a.mid.data(),
                          kTrainingSums, threads_);
  mlp_block_forward(shape_, mlp_params(p, at_[index]), a.mid.data(), rows, a.mlp,
                    residual_[index + 1].data(), kTrainingSums, threads_);
}

template <class Real>
LossStats BasicCausalLm<Real>::run_head(const CausalLmBatch& batch, bool backward) {
  const size_t rows = batch.rows(), h = config_.hidden_size, vocab = config_.vocab_size;
  ops::grow_to(final_, rows * h);
  ops::rms_norm_forward(residual_[config_.num_layers].data(), params_.data() + norm_, rows, h,
                        config_.rms_norm_eps, final_.data(), kTrainingSums);
  LossStats stats;
  stats.tokens = rows;
  for (int32_t label : batch.labels) stats.counted += label >= 0 ? 1 : 0;
  const double grad_scale = stats.counted ? 1.0 / double(stats.counted) : 0.0;
  ops::grow_to(logits_, std::min(rows, kHeadRows) * vocab);
  if (backward) ops::grow_to(d_final_, rows * h);
  const Real* head = params_.data() + head_;
  greedy_.resize(rows);
  double loss_sum = 0;
  for (size_t r0 = 0; r0 < rows; r0 += kHeadRows) {
    const size_t n = std::min(kHeadRows, rows - r0);
    ops::linear_forward(final_.data() + r0 * h, n, h, head, vocab, logits_.data(), kTrainingSums,
                        threads_);
    for (size_t r = 0; r < n; ++r) greedy_[r0 + r] = ops::argmax(logits_.data() + r * vocab, vocab);
    const ops::CrossEntropySums sums =
        ops::cross_entropy(logits_.data(), batch.labels.data() + r0, n, vocab, grad_scale,
                           backward ? logits_.data() : nullptr, threads_);
    loss_sum += sums.loss;
    stats.agreed += sums.agreed;
    if (backward) {
      ops::linear_backward_input(logits_.data(), n, vocab, head, h, d_final_.data() + r0 * h, false,
                                 threads_);
      // Tied: the head's gradient joins the embedding's (both add into one tensor).
      ops::linear_backward_weight(logits_.data(), n, vocab, final_.data() + r0 * h, h,
                                  grads_.data() + head_, threads_);
    }
  }
  if (stats.counted) {
    stats.loss = loss_sum / double(stats.counted);
    stats.agreement = double(stats.agreed) / double(stats.counted);
  }
  return stats;
}

template <class Real>
void BasicCausalLm<Real>::run_backward(const CausalLmBatch& batch) {
  const ModelConfig& c = config_;
  const size_t rows = batch.rows(), h = c.hidden_size;
  ops::grow_to(d_res_, rows * h);
  // d_res_ carries d(loss)/d(residual stream) from the last layer's output down to the
  // embedding: each block's backward turns d(its output) into d(its input) in place.
  ops::rms_norm_backward(residual_[c.num_layers].data(), params_.data() + norm_, d_final_.data(),
                         rows, h, c.rms_norm_eps, d_res_.data(), false, grads_.data() + norm_);
  for (size_t l = c.num_layers; l-- > 0;) layer_backward(l, batch);
  ops::embedding_backward(batch.tokens.data(), d_res_.data(), rows, h, grads_.data() + embed_);
}

template <class Real>
void BasicCausalLm<Real>::layer_backward(size_t index, const CausalLmBatch& batch) {
  const Real* p = params_.data();
  Real* g = grads_.data();
  const LayerOffsets& o = at_[index];
  const LayerActivations& a = acts_[index];
  mlp_block_backward(shape_, mlp_params(p, o), mlp_params(g, o), a.mid.data(), batch.rows(), a.mlp,
                     d_res_.data(), scratch_, threads_);
  attention_block_backward(shape_, attention_params(p, o), attention_params(g, o),
                           residual_[index].data(), batch.rows(), batch.doc_offsets, cos_.data(),
                           sin_.data(), a.attention, d_res_.data(), scratch_, threads_);
}

template class BasicCausalLm<float>;
template class BasicCausalLm<double>;

}  // namespace hsring::train
