#include "train/cuda_same_position_trainer.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/error.h"
#include "gpu/cuda_check.h"
#include "gpu/cuda_handles.h"
#include "gpu/ops/bf16_convert.h"
#include "gpu/ops/embedding.h"
#include "gpu/ops/rms_norm.h"
#include "gpu/ops/rope.h"
#include "model/cuda_kernels.h"
#include "ops/rope.h"
#include "train/cuda_drafter_kernels.h"
#include "train/cuda_drafter_layer.h"
#include "train/cuda_flat_state.h"
#include "train/same_position_config.h"

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
  size_t embed = 0, fc = 0, hidden_norm = 0, norm = 0, head = 0;
  DrafterLayerOffsets at;
  // The decoder layer's (train/cuda_drafter_layer.h): RoPE alone, fp32 activations (the bf16
  // Gemm rounds its operands), every row.
  DrafterLayerShape shape;

  // Per batch: metadata, activations of the forward (kept for the backward), gradients.
  Scratch<int32_t> tokens, positions, labels, doc_offsets, doc_start, doc_end, row_agreed;
  // x_fc: the projected features; the layer's x_in is their norm (+ the embedding), x_out its
  // output, f the final norm's.
  Scratch<float> features, x_fc, x_out, f, cos, sin, delta, logits, row_loss;
  DrafterLayerActivations layer;
  DrafterLayerGradients grads;
  Scratch<float> norm_partials;  // the width norms' backward: its blocks' weight gradients
  Scratch<float> d_f, d_res;     // d(loss)/d(f), and d(loss)/d(the residual stream)
  size_t head_rows = 0;          // rows of logits per chunk

  float* p(size_t offset) const { return state->params(offset); }
  float* g(size_t offset) const { return state->grads(offset); }
  DrafterLayerStep step() {
    return {gemm, *state, stream.get(), shape, false, norm_partials.get()};
  }
};

CudaSamePositionTrainer::CudaSamePositionTrainer(const SamePositionTrainerOptions& options,
                                                 GemmPrecision precision)
    : config_(options.model), optimizer_(options.optimizer) {
  check_same_position_config(config_);
  if (!attention_head_dim_supported(config_.head_dim))
    throw Error(Errc::kModelBadConfig,
                fmt::format("drafter head_dim {} is not supported on the GPU (a multiple of 32 up "
                            "to 256); train this drafter on the CPU",
                            config_.head_dim));
  layout_ = same_position_param_layout(config_);
  const DrafterLayerOffsets at = drafter_layer_offsets(layout_, 0);
  if (!projections_adjacent(at, config_.q_dim(), config_.kv_dim(), config_.width))
    throw Error(Errc::kModelBadConfig,
                fmt::format("the same-position drafter on the GPU multiplies its q, k and v "
                            "projections as one matrix, which needs num_heads x head_dim x width "
                            "and num_kv_heads x head_dim x width ({} x {}, {} x {}) to be "
                            "multiples of {}; change the width or the heads, or train this "
                            "drafter on the CPU",
                            config_.q_dim(), config_.width, config_.kv_dim(), config_.width,
                            kParamAlignment));
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
  b_->norm = offset("norm.weight");
  b_->head = offset("lm_head.weight");
  b_->at = at;
  b_->shape = {.layer = same_position_layer_shape(config_)};
  HSRING_CUDA_CHECK(cudaStreamSynchronize(s));  // `inv_freq` goes out of scope
}

CudaSamePositionTrainer::~CudaSamePositionTrainer() {
  if (b_) (void)cudaStreamSynchronize(b_->stream.get());
}

cudaStream_t CudaSamePositionTrainer::stream() const { return b_->stream.get(); }

FlatState& CudaSamePositionTrainer::flat_state() const { return *b_->state; }

void CudaSamePositionTrainer::upload_batch(const DrafterBatch& batch, Features source,
                                           const void* features) {
  const SamePositionConfig& c = config_;
  Buffers& b = *b_;
  cudaStream_t s = b.stream.get();
  const size_t rows = batch.rows();
  const size_t fd = c.feature_dim(), d = c.width, heads = c.num_heads;
  const size_t docs = batch.doc_offsets.size() - 1;

  for (auto* buffer : {&b.tokens, &b.positions, &b.labels, &b.doc_start, &b.doc_end, &b.row_agreed})
    buffer->ensure(rows);
  b.doc_offsets.ensure(docs + 1);
  b.features.ensure(rows * fd);
  for (auto* buffer : {&b.x_fc, &b.x_out, &b.f, &b.d_f, &b.d_res}) buffer->ensure(rows * d);
  b.layer.ensure(b.shape, rows, false);
  b.grads.ensure(b.shape, rows, 0);
  for (auto* buffer : {&b.cos, &b.sin}) buffer->ensure(rows * (c.head_dim / 2));
  b.delta.ensure(rows * heads);
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

void CudaSamePositionTrainer::run_forward(uint32_t rows) {
  const SamePositionConfig& c = config_;
  Buffers& b = *b_;
  const DrafterLayerStep step = b.step();
  cudaStream_t s = step.stream();
  const size_t d = c.width;
  DrafterLayerActivations& a = b.layer;

  // Input: the projected, normalised captured states (+ the token's embedding).
  b.gemm.forward(b.features.get(), rows, c.feature_dim(), b.p(b.fc), d, b.x_fc.get());
  step.norm(b.x_fc.get(), b.p(b.hidden_norm), rows, d, a.x_in.get());
  if (c.embed_tokens)
    HSRING_CUDA_CHECK(gpu::launch_embedding_forward(b.p(b.embed), b.tokens.get(), rows, uint32_t(d),
                                                    a.x_in.get(), s));

  // The decoder layer (train/cuda_drafter_layer.h) around the sliding-window attention; q
  // and k keep their rotated values for the backward.
  step.attention_inputs_forward(b.at, a, rows, b.cos.get(), b.sin.get(), a.x_mid.get(), nullptr);
  HSRING_CUDA_CHECK(launch_attention_forward(a.q.get(), a.k.get(), a.v.get(), b.doc_start.get(),
                                             b.shape.layer.attention(rows), a.attn.fp32.get(),
                                             a.lse.get(), s));
  step.attention_output_forward(b.at, a, rows, nullptr);
  step.mlp_forward(b.at, a, rows, b.x_out.get());

  step.norm(b.x_out.get(), b.p(b.norm), rows, d, b.f.get());
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
  const DrafterLayerStep step = b.step();
  cudaStream_t s = step.stream();
  const size_t d = c.width;
  const DrafterLayerActivations& a = b.layer;
  DrafterLayerGradients& grads = b.grads;
  const ResidualGradient d_res{b.d_res.get(), nullptr};

  // d_res carries d(loss)/d(residual stream) down: the layer's output, its mid, its input.
  step.norm_backward(b.x_out.get(), b.p(b.norm), b.d_f.get(), rows, d, b.d_res.get(), false,
                     b.g(b.norm));
  step.mlp_backward(b.at, a, rows, grads, d_res);
  step.attention_output_backward(b.at, a, rows, nullptr, grads, d_res, {});
  HSRING_CUDA_CHECK(launch_attention_backward(
      a.q.get(), a.k.get(), a.v.get(), a.attn.fp32.get(), grads.d_attn.get(), a.lse.get(),
      b.doc_start.get(), b.doc_end.get(), b.shape.layer.attention(rows), b.delta.get(),
      grads.d_q.get(), grads.d_k.get(), grads.d_v.get(), s));
  step.rotation_backward(b.at, a, rows, b.cos.get(), b.sin.get(), grads);
  step.projections_backward(b.at, a, rows, nullptr, grads, d_res);

  // Input. The features are the target's: no gradient flows to them.
  if (c.embed_tokens)
    HSRING_CUDA_CHECK(gpu::launch_embedding_backward(b.tokens.get(), b.d_res.get(), rows,
                                                     uint32_t(d), b.g(b.embed), s));
  float* d_x_fc = grads.d_m.get();  // free once the layer's backward is done
  step.norm_backward(b.x_fc.get(), b.p(b.hidden_norm), b.d_res.get(), rows, d, d_x_fc, false,
                     b.g(b.hidden_norm));
  b.gemm.backward_weight(d_x_fc, rows, d, b.features.get(), c.feature_dim(), b.g(b.fc));
}

LossStats CudaSamePositionTrainer::run(const DrafterBatch& batch, Features source,
                                       const void* features, bool backward) {
  if (source == Features::kHostFp32)
    validate_drafter_batch(batch, config_);
  else
    validate_drafter_metadata(batch, config_);
  if (backward) b_->state->zero_gradients();
  // The layer holds the bf16 rounding of the gradients that two products read; this step's
  // holds start here.
  b_->gemm.release_holds();
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

}  // namespace hsring::train
