#include "model/cpu_target_model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "common/error.h"
#include "common/parallel.h"
#include "model/cpu_delta_net.h"
#include "model/cpu_moe.h"
#include "model/decoder_layer.h"
#include "model/hf_checkpoint.h"
#include "model/model_text_file.h"
#include "model/rope.h"
#include "ops/argmax.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/rms_norm.h"

namespace hsring {

namespace {

// Rows of logits computed at once when only the greedy labels are wanted: bounds the
// scratch to kHeadChunk * V floats (39 MB for Qwen's 151936-token vocabulary).
constexpr size_t kHeadChunk = 64;

// The CPU forward sums in fp32 (ops/sums.h): the rounding the CUDA forward is checked with.
constexpr ops::Sums kSums = ops::Sums::kFloat;

void ensure(std::vector<float>& buffer, size_t size) {
  if (buffer.size() < size) buffer.resize(size);
}

}  // namespace

CpuTargetModel::CpuTargetModel(ModelConfig config, ModelWeights weights, CpuModelOptions options)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      threads_(resolve_threads(options.threads)) {
  if (!config_.no_native_forward.empty())
    throw Error(Errc::kModelBadConfig, config_.no_native_forward);
  if (std::string why = validate_config(config_); !why.empty())
    throw Error(Errc::kModelBadConfig, "model '" + config_.name + "': " + why);
  if (std::string why = check_weights(config_, weights_); !why.empty())
    throw Error(Errc::kModelBadConfig, "weights do not fit model '" + config_.name + "': " + why);
}

void CpuTargetModel::forward(const PackedBatch& batch, const ForwardRequest& request,
                             ForwardOutput& out) {
  validate_batch(batch, config_);
  validate_request(request, config_);
  const size_t rows = batch.tokens.size();
  const size_t h = config_.hidden_size;

  ensure(residual_, rows * h);
  ops::embedding_forward(weights_.embed_tokens.data(), batch.tokens.data(), rows, h,
                         residual_.data(), false);
  // RoPE angles depend on positions (and, for dynamic NTK, document lengths) only: once per
  // forward, shared by every layer.
  const size_t half = config_.rope_dim() / 2;
  ensure(rope_cos_, rows * half);
  ensure(rope_sin_, rows * half);
  rope_tables(config_.rope, config_.rope_theta, config_.rope_dim(), batch.positions,
              batch.doc_offsets, rope_cos_.data(), rope_sin_.data());

  out.token_count = uint32_t(rows);
  out.hidden_size = uint32_t(h);
  out.captured.resize(request.capture_layers.size());
  // The last layer any request needs: layers past it only matter for the LM head.
  const bool head = request.logits || request.greedy;
  uint32_t last = head ? config_.num_layers : 0;
  for (int32_t id : request.capture_layers) last = std::max(last, uint32_t(id) + 1);

  for (uint32_t layer = 0; layer < last; ++layer) {
    run_layer(layer, batch);
    for (size_t k = 0; k < request.capture_layers.size(); ++k)
      if (request.capture_layers[k] == int32_t(layer))
        out.captured[k].assign(residual_.begin(), residual_.begin() + std::ptrdiff_t(rows * h));
  }
  out.logits.clear();
  out.greedy.clear();
  if (head) run_head(rows, request, out);
}

void CpuTargetModel::run_layer(uint32_t index, const PackedBatch& batch) {
  const LayerWeights& w = weights_.layers[index];
  const ModelConfig& c = config_;
  const size_t rows = batch.tokens.size();
  const size_t h = c.hidden_size;
  ensure(normed_, rows * h);
  ensure(mixed_, rows * h);
  ensure(mid_, rows * h);
  const DecoderLayerShape shape = decoder_layer_shape(c);

  // Token mixer, residual_ -> mid_: the attention block (model/decoder_layer.h), or
  // pre-norm and DeltaNet with its skip.
  if (c.kind(index) == LayerKind::kDeltaNet) {
    ops::rms_norm_forward(residual_.data(), w.input_norm.data(), rows, h, c.rms_norm_eps,
                          normed_.data(), kSums);
    run_delta_net(w, batch);
    for (size_t i = 0; i < rows * h; ++i) mid_[i] = residual_[i] + mixed_[i];
  } else {
    const AttentionBlockParams<const float*> aw{
        w.input_norm.data(), w.q_proj.data(), w.k_proj.data(), w.v_proj.data(), w.o_proj.data(),
        w.q_bias.data(),     w.k_bias.data(), w.v_bias.data(), w.q_norm.data(), w.k_norm.data()};
    attention_block_forward(shape, aw, residual_.data(), rows, batch.doc_offsets, rope_cos_.data(),
                            rope_sin_.data(), attention_, mid_.data(), kSums, threads_);
  }

  // MLP, mid_ -> residual_: the MLP block, or pre-norm and a mixture of experts with its skip.
  if (c.mlp_kind(index) == MlpKind::kExperts) {
    ops::rms_norm_forward(mid_.data(), w.post_attention_norm.data(), rows, h, c.rms_norm_eps,
                          normed_.data(), kSums);
    moe_mlp(normed_.data(), rows, h, c.moe, w.moe, mlp_, mixed_.data(), threads_);
    for (size_t i = 0; i < rows * h; ++i) residual_[i] = mid_[i] + mixed_[i];
  } else {
    const MlpBlockParams<const float*> mw{w.post_attention_norm.data(), w.gate_proj.data(),
                                          w.up_proj.data(), w.down_proj.data()};
    mlp_block_forward(shape, mw, mid_.data(), rows, dense_mlp_, residual_.data(), kSums, threads_);
  }
}

void CpuTargetModel::run_delta_net(const LayerWeights& w, const PackedBatch& batch) {
  const ModelConfig& c = config_;
  const DeltaNetShape& s = c.delta_net;
  const DeltaNetWeights& n = w.delta_net;
  const size_t rows = batch.tokens.size();
  const size_t h = c.hidden_size;
  ensure(dn_qkv_, rows * s.conv_dim());
  ensure(dn_conv_, rows * s.conv_dim());
  ensure(dn_z_, rows * s.v_dim());
  ensure(dn_a_, rows * s.v_heads);
  ensure(dn_b_, rows * s.v_heads);
  ensure(dn_out_, rows * s.v_dim());
  ops::linear_forward(normed_.data(), rows, h, n.in_proj_qkv.data(), s.conv_dim(), dn_qkv_.data(),
                      kSums, threads_);
  ops::linear_forward(normed_.data(), rows, h, n.in_proj_z.data(), s.v_dim(), dn_z_.data(), kSums,
                      threads_);
  ops::linear_forward(normed_.data(), rows, h, n.in_proj_b.data(), s.v_heads, dn_b_.data(), kSums,
                      threads_);
  ops::linear_forward(normed_.data(), rows, h, n.in_proj_a.data(), s.v_heads, dn_a_.data(), kSums,
                      threads_);
  causal_conv_silu(dn_qkv_.data(), s.conv_dim(), n.conv.data(), s.conv_kernel, batch.doc_offsets,
                   dn_conv_.data());
  delta_gates(dn_a_.data(), dn_b_.data(), rows, s.v_heads, n.a_log.data(), n.dt_bias.data());
  gated_delta_rule(dn_conv_.data(), dn_a_.data(), dn_b_.data(), rows, s, batch.doc_offsets,
                   dn_out_.data(), threads_);
  gated_rms_norm(dn_out_.data(), dn_z_.data(), n.norm.data(), rows * s.v_heads, s.v_head_dim,
                 c.rms_norm_eps, dn_out_.data());
  ops::linear_forward(dn_out_.data(), rows, s.v_dim(), n.out_proj.data(), h, mixed_.data(), kSums,
                      threads_);
}

void CpuTargetModel::run_head(size_t rows, const ForwardRequest& request, ForwardOutput& out) {
  const size_t h = config_.hidden_size;
  const size_t vocab = config_.vocab_size;
  const std::vector<float>& head = weights_.lm_head_or_embeddings();
  ops::rms_norm_forward(residual_.data(), weights_.final_norm.data(), rows, h, config_.rms_norm_eps,
                        normed_.data(), kSums);
  if (request.logits) out.logits.resize(rows * vocab);
  if (request.greedy) out.greedy.resize(rows);
  std::vector<float> chunk;
  for (size_t r0 = 0; r0 < rows; r0 += kHeadChunk) {
    const size_t n = std::min(kHeadChunk, rows - r0);
    float* logits = request.logits ? out.logits.data() + r0 * vocab : nullptr;
    if (!logits) {
      chunk.resize(n * vocab);
      logits = chunk.data();
    }
    ops::linear_forward(normed_.data() + r0 * h, n, h, head.data(), vocab, logits, kSums, threads_);
    if (request.greedy)
      for (size_t r = 0; r < n; ++r) out.greedy[r0 + r] = ops::argmax(logits + r * vocab, vocab);
  }
}

ModelConfig model_config_of(const std::string& spec) {
  std::error_code ec;
  if (std::filesystem::is_directory(spec, ec)) return load_hf_checkpoint_config(spec);
  if (spec.find('/') != std::string::npos)
    throw Error(Errc::kModel, "model folder '" + spec + "' does not exist");
  return named_model_config(spec);
}

ModelConfig model_outline_of(const std::string& spec) {
  std::error_code ec;
  if (!std::filesystem::is_directory(spec, ec)) return model_config_of(spec);
  try {
    return model_config_of(spec);
  } catch (const Error& e) {
    if (e.code() != Errc::kModelBadConfig) throw;
    const std::filesystem::path config = std::filesystem::path(spec) / "config.json";
    return parse_hf_outline(read_model_text_file(config), config.string(), e.what());
  }
}

std::unique_ptr<CpuTargetModel> open_cpu_model(const std::string& spec, uint64_t seed,
                                               CpuModelOptions options) {
  ModelConfig config = model_config_of(spec);
  std::error_code ec;
  ModelWeights weights = std::filesystem::is_directory(spec, ec) ? load_hf_weights(spec, config)
                                                                 : random_weights(config, seed);
  return std::make_unique<CpuTargetModel>(std::move(config), std::move(weights), options);
}

}  // namespace hsring
