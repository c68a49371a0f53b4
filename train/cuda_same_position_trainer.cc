#include "train/cuda_same_position_trainer.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "gpu/cuda_check.h"
#include "gpu/cuda_handles.h"
#include "gpu/ops/bf16_convert.h"
#include "gpu/ops/embedding.h"
#include "gpu/ops/rms_norm.h"
#include "gpu/ops/rope.h"
#include "gpu/ops/swiglu.h"
#include "model/cuda_kernels.h"
#include "ops/rope.h"
#include "train/cuda_drafter_kernels.h"
#include "train/cuda_flat_state.h"

namespace hsring::train {

struct CudaSamePositionTrainer::Buffers {
  explicit Buffers(GemmPrecision precision) : stream(gpu::make_stream()), gemm(precision) {
    gemm.bind(stream.get());
  }

  gpu::Stream stream;
  Gemm gemm;
  std::unique_ptr<FlatState> state;  // master weights, gradient, AdamW moments
  gpu::DeviceBuffer inv_freq;        // double [head_dim / 2]
  // Tensor offsets in the flat buffers.
  size_t embed = 0, fc = 0, hidden_norm = 0, input_norm = 0, q = 0, k = 0, v_proj = 0, o = 0,
         post_norm = 0, gate = 0, up = 0, down = 0, norm = 0, head = 0;

  // Per batch: metadata, activations of the forward (kept for the backward), gradients.
  Scratch<int32_t> tokens, positions, labels, doc_offsets, doc_start, doc_end, row_agreed;
  Scratch<float> features, x_fc, h0, a1, q_act, k_act, v_act, attn, h1, mlp_in, gate_act, up_act,
      act, h2, f, cos, sin, lse, delta, logits, row_loss;
  Scratch<float> norm_partials;  // the width norms' backward: its blocks' weight gradients
  Scratch<float> d_f, d_res, d_a, d_gate, d_up, d_act, d_q, d_k, d_v;
  size_t head_rows = 0;  // rows of logits per chunk

  float* p(size_t offset) const { return state->params(offset); }
  float* g(size_t offset) const { return state->grads(offset); }
};

CudaSamePositionTrainer::CudaSamePositionTrainer(const SamePositionTrainerOptions& options,
                                                 GemmPrecision precision)
    : config_(options.model), optimizer_(options.optimizer) {
  check_same_position_config(config_);
  if (!attention_head_dim_supported(config_.head_dim))
    throw Error(Errc::kModelBadConfig,
                "drafter head_dim " + std::to_string(config_.head_dim) +
                    " is not supported on the GPU (a multiple of 32 up to 256); train "
                    "this drafter on the CPU");
  layout_ = same_position_param_layout(config_);
  std::vector<float> host(layout_.total, 0.0f);
  init_same_position_params<float>(config_, layout_,
                                   SamePositionInit{options.seed, options.lm_head_init}, host);

  b_ = std::make_unique<Buffers>(precision);
  cudaStream_t s = b_->stream.get();
  b_->state = std::make_unique<FlatState>(layout_, optimizer_, host, s);

  const uint32_t half = config_.head_dim / 2;
  const std::vector<double> inv_freq =
      ops::rope_inverse_frequencies(config_.head_dim, config_.rope_theta);
  b_->inv_freq = gpu::DeviceBuffer::allocate(half * sizeof(double));
  HSRING_CUDA_CHECK(cudaMemcpyAsync(b_->inv_freq.data(), inv_freq.data(), half * sizeof(double),
                                    cudaMemcpyHostToDevice, s));

  const auto offset = [this](const char* name) { return layout_.at(name).offset; };
  if (config_.embed_tokens) b_->embed = offset("embed_tokens.weight");
  b_->fc = offset("fc.weight");
  b_->hidden_norm = offset("hidden_norm.weight");
  b_->input_norm = offset("layers.0.input_layernorm.weight");
  b_->q = offset("layers.0.self_attn.q_proj.weight");
  b_->k = offset("layers.0.self_attn.k_proj.weight");
  b_->v_proj = offset("layers.0.self_attn.v_proj.weight");
  b_->o = offset("layers.0.self_attn.o_proj.weight");
  b_->post_norm = offset("layers.0.post_attention_layernorm.weight");
  b_->gate = offset("layers.0.mlp.gate_proj.weight");
  b_->up = offset("layers.0.mlp.up_proj.weight");
  b_->down = offset("layers.0.mlp.down_proj.weight");
  b_->norm = offset("norm.weight");
  b_->head = offset("lm_head.weight");
  HSRING_CUDA_CHECK(cudaStreamSynchronize(s));  // `inv_freq` goes out of scope
}

CudaSamePositionTrainer::~CudaSamePositionTrainer() {
  if (b_) (void)cudaStreamSynchronize(b_->stream.get());
}

cudaStream_t CudaSamePositionTrainer::stream() const { return b_->stream.get(); }

float* CudaSamePositionTrainer::device_gradients() { return b_->state->grads(); }

uint64_t CudaSamePositionTrainer::optimizer_step() const { return b_->state->step(); }

void CudaSamePositionTrainer::upload_batch(const DrafterBatch& batch, Features source,
                                           const void* features) {
  const SamePositionConfig& c = config_;
  Buffers& b = *b_;
  cudaStream_t s = b.stream.get();
  const size_t rows = batch.rows();
  const size_t fd = c.feature_dim(), d = c.width, qd = c.q_dim(), kvd = c.kv_dim();
  const size_t inter = c.intermediate_size, heads = c.num_heads;
  const size_t docs = batch.doc_offsets.size() - 1;

  for (auto* buffer : {&b.tokens, &b.positions, &b.labels, &b.doc_start, &b.doc_end, &b.row_agreed})
    buffer->ensure(rows);
  b.doc_offsets.ensure(docs + 1);
  b.features.ensure(rows * fd);
  for (auto* buffer :
       {&b.x_fc, &b.h0, &b.a1, &b.h1, &b.mlp_in, &b.h2, &b.f, &b.d_f, &b.d_res, &b.d_a})
    buffer->ensure(rows * d);
  for (auto* buffer : {&b.q_act, &b.attn, &b.d_q}) buffer->ensure(rows * qd);
  for (auto* buffer : {&b.k_act, &b.v_act, &b.d_k, &b.d_v}) buffer->ensure(rows * kvd);
  for (auto* buffer : {&b.gate_act, &b.up_act, &b.act, &b.d_gate, &b.d_up})
    buffer->ensure(rows * inter);
  b.d_act.ensure(rows * std::max(inter, qd));  // d(act), later d(attn)
  for (auto* buffer : {&b.cos, &b.sin}) buffer->ensure(rows * (c.head_dim / 2));
  for (auto* buffer : {&b.lse, &b.delta}) buffer->ensure(rows * heads);
  b.norm_partials.ensure(size_t(gpu::kRmsNormBackwardBlocks) * d);
  b.row_loss.ensure(rows);
  b.head_rows = std::max<size_t>(1, std::min(rows, kMaxLogitValues / c.vocab_size));
  b.logits.ensure(b.head_rows * c.vocab_size);

  const auto upload = [s](void* dst, const void* src, size_t bytes) {
    HSRING_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
  };
  upload(b.tokens.get(), batch.tokens.data(), rows * sizeof(int32_t));
  upload(b.positions.get(), batch.positions.data(), rows * sizeof(int32_t));
  upload(b.labels.get(), batch.labels.data(), rows * sizeof(int32_t));
  upload(b.doc_offsets.get(), batch.doc_offsets.data(), (docs + 1) * sizeof(int32_t));
  if (source == Features::kHostFp32) {
    upload(b.features.get(), features, rows * fd * sizeof(float));
  } else {
    HSRING_CUDA_CHECK(gpu::launch_bf16_to_float(static_cast<const uint16_t*>(features), rows * fd,
                                                b.features.get(), s));
  }
  HSRING_CUDA_CHECK(launch_doc_bounds(b.doc_offsets.get(), uint32_t(docs), uint32_t(rows),
                                      b.doc_start.get(), b.doc_end.get(), s));
  HSRING_CUDA_CHECK(gpu::launch_rope_table(b.positions.get(), uint32_t(rows),
                                           b.inv_freq.as<double>(), nullptr, 1.0, c.head_dim / 2,
                                           b.cos.get(), b.sin.get(), s));
}

void CudaSamePositionTrainer::rotate_qk(uint32_t rows, float* q, float* k, bool inverse) {
  const SamePositionConfig& c = config_;
  Buffers& b = *b_;
  HSRING_CUDA_CHECK(gpu::launch_rope_apply(q, rows, c.num_heads, c.head_dim, b.cos.get(),
                                           b.sin.get(), inverse, b.stream.get()));
  HSRING_CUDA_CHECK(gpu::launch_rope_apply(k, rows, c.num_kv_heads, c.head_dim, b.cos.get(),
                                           b.sin.get(), inverse, b.stream.get()));
}

void CudaSamePositionTrainer::run_forward(uint32_t rows) {
  const SamePositionConfig& c = config_;
  Buffers& b = *b_;
  cudaStream_t s = b.stream.get();
  Gemm& gemm = b.gemm;
  const size_t fd = c.feature_dim(), d = c.width, qd = c.q_dim(), kvd = c.kv_dim();
  const size_t inter = c.intermediate_size;
  const auto eps = float(c.rms_norm_eps);
  const auto norm = [&](const float* x, size_t weight, float* y) {
    HSRING_CUDA_CHECK(gpu::launch_rms_norm_forward(x, b.p(weight), rows, uint32_t(d), eps, y, s));
  };
  const auto copy = [&](float* dst, const float* src, size_t count) {
    HSRING_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyDeviceToDevice, s));
  };

  // Input: the projected, normalised captured states (+ the token's embedding).
  gemm.forward(b.features.get(), rows, fd, b.p(b.fc), d, b.x_fc.get());
  norm(b.x_fc.get(), b.hidden_norm, b.h0.get());
  if (c.embed_tokens)
    HSRING_CUDA_CHECK(gpu::launch_embedding_forward(b.p(b.embed), b.tokens.get(), rows, uint32_t(d),
                                                    b.h0.get(), s));

  // Attention block; q and k keep their rotated values for the backward.
  norm(b.h0.get(), b.input_norm, b.a1.get());
  gemm.forward(b.a1.get(), rows, d, b.p(b.q), qd, b.q_act.get());
  gemm.forward(b.a1.get(), rows, d, b.p(b.k), kvd, b.k_act.get());
  gemm.forward(b.a1.get(), rows, d, b.p(b.v_proj), kvd, b.v_act.get());
  rotate_qk(rows, b.q_act.get(), b.k_act.get(), false);
  const AttentionDims dims{rows, c.num_heads, c.num_kv_heads, c.head_dim, c.window};
  HSRING_CUDA_CHECK(launch_attention_forward(b.q_act.get(), b.k_act.get(), b.v_act.get(),
                                             b.doc_start.get(), dims, b.attn.get(), b.lse.get(),
                                             s));
  copy(b.h1.get(), b.h0.get(), rows * d);  // the residual, then the output projection on it
  gemm.forward(b.attn.get(), rows, qd, b.p(b.o), d, b.h1.get(), true);

  // MLP block.
  norm(b.h1.get(), b.post_norm, b.mlp_in.get());
  gemm.forward(b.mlp_in.get(), rows, d, b.p(b.gate), inter, b.gate_act.get());
  gemm.forward(b.mlp_in.get(), rows, d, b.p(b.up), inter, b.up_act.get());
  HSRING_CUDA_CHECK(
      gpu::launch_swiglu_forward(b.gate_act.get(), b.up_act.get(), rows * inter, b.act.get(), s));
  copy(b.h2.get(), b.h1.get(), rows * d);
  gemm.forward(b.act.get(), rows, inter, b.p(b.down), d, b.h2.get(), true);

  norm(b.h2.get(), b.norm, b.f.get());
}

LossStats CudaSamePositionTrainer::run_head(const DrafterBatch& batch, bool backward) {
  Buffers& b = *b_;
  cudaStream_t s = b.stream.get();
  const size_t rows = batch.rows();
  const size_t d = config_.width, vocab = config_.vocab_size;
  LossStats stats;
  stats.tokens = rows;
  for (int32_t label : batch.labels) stats.counted += label >= 0 ? 1 : 0;
  const float grad_scale = stats.counted ? 1.0f / float(stats.counted) : 0.0f;
  for (size_t r0 = 0; r0 < rows; r0 += b.head_rows) {
    const size_t n = std::min(b.head_rows, rows - r0);
    b.gemm.forward(b.f.get() + r0 * d, n, d, b.p(b.head), vocab, b.logits.get());
    HSRING_CUDA_CHECK(launch_cross_entropy(b.logits.get(), b.labels.get() + r0, uint32_t(n),
                                           uint32_t(vocab), grad_scale, backward,
                                           b.row_loss.get() + r0, b.row_agreed.get() + r0, s));
    if (backward) {
      // The logits now hold d(loss)/d(logits) of these rows.
      b.gemm.backward_input(b.logits.get(), n, vocab, b.p(b.head), d, b.d_f.get() + r0 * d);
      b.gemm.backward_weight(b.logits.get(), n, vocab, b.f.get() + r0 * d, d, b.g(b.head));
    }
  }
  std::vector<float> row_loss(rows);
  std::vector<int32_t> row_agreed(rows);
  HSRING_CUDA_CHECK(cudaMemcpyAsync(row_loss.data(), b.row_loss.get(), rows * sizeof(float),
                                    cudaMemcpyDeviceToHost, s));
  HSRING_CUDA_CHECK(cudaMemcpyAsync(row_agreed.data(), b.row_agreed.get(), rows * sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, s));
  HSRING_CUDA_CHECK(cudaStreamSynchronize(s));
  double loss_sum = 0;
  for (size_t r = 0; r < rows; ++r) {
    loss_sum += row_loss[r];
    stats.agreed += uint64_t(row_agreed[r]);
  }
  if (stats.counted) {
    stats.loss = loss_sum / double(stats.counted);
    stats.agreement = double(stats.agreed) / double(stats.counted);
  }
  return stats;
}

void CudaSamePositionTrainer::run_backward(uint32_t rows) {
  const SamePositionConfig& c = config_;
  Buffers& b = *b_;
  cudaStream_t s = b.stream.get();
  Gemm& gemm = b.gemm;
  const size_t fd = c.feature_dim(), d = c.width, qd = c.q_dim(), kvd = c.kv_dim();
  const size_t inter = c.intermediate_size;
  const auto eps = float(c.rms_norm_eps);
  // dx of RMSNorm(x) from dy, written or added; the weight's gradient added.
  const auto norm_backward = [&](const float* x, size_t weight, const float* dy, float* dx,
                                 bool accumulate) {
    HSRING_CUDA_CHECK(gpu::launch_rms_norm_backward_rows(x, b.p(weight), dy, rows, uint32_t(d), eps,
                                                         dx, accumulate, b.g(weight),
                                                         b.norm_partials.get(), s));
  };

  // d_res carries d(loss)/d(residual stream) down the layer: h2, then h1, then h0.
  norm_backward(b.h2.get(), b.norm, b.d_f.get(), b.d_res.get(), false);

  // MLP block.
  gemm.backward_input(b.d_res.get(), rows, d, b.p(b.down), inter, b.d_act.get());
  gemm.backward_weight(b.d_res.get(), rows, d, b.act.get(), inter, b.g(b.down));
  HSRING_CUDA_CHECK(gpu::launch_swiglu_backward(b.gate_act.get(), b.up_act.get(), b.d_act.get(),
                                                rows * inter, b.d_gate.get(), b.d_up.get(), s));
  gemm.backward_input(b.d_gate.get(), rows, inter, b.p(b.gate), d, b.d_a.get());
  gemm.backward_input(b.d_up.get(), rows, inter, b.p(b.up), d, b.d_a.get(), true);
  gemm.backward_weight(b.d_gate.get(), rows, inter, b.mlp_in.get(), d, b.g(b.gate));
  gemm.backward_weight(b.d_up.get(), rows, inter, b.mlp_in.get(), d, b.g(b.up));
  norm_backward(b.h1.get(), b.post_norm, b.d_a.get(), b.d_res.get(), true);

  // Attention block.
  float* d_attn = b.d_act.get();
  gemm.backward_input(b.d_res.get(), rows, d, b.p(b.o), qd, d_attn);
  gemm.backward_weight(b.d_res.get(), rows, d, b.attn.get(), qd, b.g(b.o));
  const AttentionDims dims{rows, c.num_heads, c.num_kv_heads, c.head_dim, c.window};
  HSRING_CUDA_CHECK(launch_attention_backward(b.q_act.get(), b.k_act.get(), b.v_act.get(),
                                              b.attn.get(), d_attn, b.lse.get(), b.doc_start.get(),
                                              b.doc_end.get(), dims, b.delta.get(), b.d_q.get(),
                                              b.d_k.get(), b.d_v.get(), s));
  rotate_qk(rows, b.d_q.get(), b.d_k.get(), true);
  gemm.backward_input(b.d_q.get(), rows, qd, b.p(b.q), d, b.d_a.get());
  gemm.backward_input(b.d_k.get(), rows, kvd, b.p(b.k), d, b.d_a.get(), true);
  gemm.backward_input(b.d_v.get(), rows, kvd, b.p(b.v_proj), d, b.d_a.get(), true);
  gemm.backward_weight(b.d_q.get(), rows, qd, b.a1.get(), d, b.g(b.q));
  gemm.backward_weight(b.d_k.get(), rows, kvd, b.a1.get(), d, b.g(b.k));
  gemm.backward_weight(b.d_v.get(), rows, kvd, b.a1.get(), d, b.g(b.v_proj));
  norm_backward(b.h0.get(), b.input_norm, b.d_a.get(), b.d_res.get(), true);

  // Input. The features are the target's: no gradient flows to them.
  if (c.embed_tokens)
    HSRING_CUDA_CHECK(gpu::launch_embedding_backward(b.tokens.get(), b.d_res.get(), rows,
                                                     uint32_t(d), b.g(b.embed), s));
  norm_backward(b.x_fc.get(), b.hidden_norm, b.d_res.get(), b.d_a.get(), false);
  gemm.backward_weight(b.d_a.get(), rows, d, b.features.get(), fd, b.g(b.fc));
}

LossStats CudaSamePositionTrainer::run(const DrafterBatch& batch, Features source,
                                       const void* features, bool backward) {
  if (source == Features::kHostFp32)
    validate_drafter_batch(batch, config_);
  else
    validate_drafter_metadata(batch, config_);
  if (backward) b_->state->zero_gradients();
  upload_batch(batch, source, features);
  run_forward(uint32_t(batch.rows()));
  LossStats stats = run_head(batch, backward);
  if (backward) run_backward(uint32_t(batch.rows()));
  return stats;
}

LossStats CudaSamePositionTrainer::compute_gradients(const DrafterBatch& batch) {
  return run(batch, Features::kHostFp32, batch.features.data(), true);
}

LossStats CudaSamePositionTrainer::compute_gradients_bf16(const uint16_t* features,
                                                          const DrafterBatch& batch) {
  return run(batch, Features::kDeviceBf16, features, true);
}

LossStats CudaSamePositionTrainer::evaluate(const DrafterBatch& batch) {
  return run(batch, Features::kHostFp32, batch.features.data(), false);
}

void CudaSamePositionTrainer::scale_gradients(float factor) { b_->state->scale_gradients(factor); }

UpdateStats CudaSamePositionTrainer::apply_gradients() { return b_->state->apply_gradients(); }

std::span<float> CudaSamePositionTrainer::host_gradients() { return b_->state->host_gradients(); }

void CudaSamePositionTrainer::host_gradients_changed() { b_->state->host_gradients_changed(); }

std::vector<float> CudaSamePositionTrainer::params() const { return b_->state->download_params(); }
std::vector<float> CudaSamePositionTrainer::gradients() const {
  return b_->state->download_gradients();
}

TrainerState CudaSamePositionTrainer::state() const { return b_->state->state(); }

void CudaSamePositionTrainer::load_state(const TrainerState& state) {
  b_->state->load_state(state);
}

}  // namespace hsring::train
