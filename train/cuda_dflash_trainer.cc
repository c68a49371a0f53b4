#include "train/cuda_dflash_trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>

#include "common/error.h"
#include "common/ignore_label.h"
#include "gpu/cuda_check.h"
#include "gpu/cuda_handles.h"
#include "gpu/ops/argmax.h"
#include "gpu/ops/bf16_convert.h"
#include "gpu/ops/gather_rows.h"
#include "gpu/ops/rms_norm.h"
#include "gpu/ops/rope.h"
#include "model/cuda_kernels.h"
#include "ops/rope.h"
#include "train/cuda_block_attention.h"
#include "train/cuda_block_attention_bf16.h"
#include "train/cuda_drafter_kernels.h"
#include "train/cuda_drafter_layer.h"
#include "train/cuda_flat_state.h"
#include "train/dflash_config.h"
#include "train/dflash_params.h"

namespace hsring::train {

namespace {

// The options without the target's weights, which would otherwise be kept twice.
DflashTrainerOptions without_target(const DflashTrainerOptions& o) {
  DflashTrainerOptions copy;
  copy.model = o.model;
  copy.optimizer = o.optimizer;
  copy.seed = o.seed;
  copy.threads = o.threads;
  copy.anchors = o.anchors;
  copy.labels = o.labels;
  return copy;
}

}  // namespace

struct CudaDflashTrainer::Buffers {
  explicit Buffers(GemmPrecision precision) : stream(gpu::make_stream()), gemm(precision) {
    gemm.bind(stream.get());
  }

  // One layer's activations (train/cuda_drafter_layer.h: k and v are the block rows'),
  // and its context keys and values: fp32 for the fp32 block attention, or bf16 (its inputs'
  // precision), only the precision's set allocated. ctx_k_raw: the context keys' projection
  // before QK-norm and RoPE (bf16 in bf16 mode, as autocast's projections write them).
  struct LayerActivations : DrafterLayerActivations {
    Scratch<float> ctx_k, ctx_v;
    Scratch<uint16_t> ctx_k_bf16, ctx_v_bf16;
    Fp32OrBf16 ctx_k_raw;
    BlockAttentionBf16Inputs attention_bf16() const {
      return {q_bf16.get(), ctx_k_bf16.get(), ctx_v_bf16.get(), k_bf16.get(), v_bf16.get()};
    }
  };

  gpu::Stream stream;
  Gemm gemm;
  std::unique_ptr<FlatState> state;
  gpu::DeviceBuffer embed, lm_head;  // the target's, frozen; lm_head empty when tied
  const float* head = nullptr;
  gpu::DeviceBuffer inv_freq;  // double [head_dim / 2]
  size_t fc = 0, hidden_norm = 0, norm = 0;
  std::vector<DrafterLayerOffsets> at;
  DrafterLayerShape shape;  // bf16 activations in bf16 mode, the attention's inputs too
                            // when bf16_attention

  // Per batch: ctx_rows context rows, blocks * B block rows, of which `scored` (j >= 1)
  // go through the head.
  size_t ctx_rows = 0, blocks = 0, rows = 0, scored = 0, head_rows = 0, tiles_count = 0;
  size_t max_logit_values = kMaxLogitValues;  // the head's chunks: head_rows of them
  bool backward = false;
  bool drafting = false;  // draft(): the head writes each scored row's argmax to `drafted`
  Scratch<int32_t> drafted;
  float* drafted_logits = nullptr;  // draft() with logits: [scored, V] on the host, or null
  Scratch<int32_t> positions, block_tokens, block_positions, context, scored_rows, scored_labels,
      row_agreed;
  // The last layer past its attention, the final norm and the head take only the scored
  // rows (the anchors' rows reach no loss there): scored_rows picks them out of the block
  // rows, scored_of_row [rows] (each block row's scored index, or -1 for an anchor) takes
  // their gradients back.
  Scratch<int32_t> scored_of_row;
  // Layer 0's block rows are the anchors' embeddings and, in every other row, the mask
  // token's (MaskRows, train/cuda_drafter_layer.h): its q/k/v projections are made for
  // layer0_rows [blocks + 1] (the anchors' rows, then row 1, a mask row) and copied to
  // every block row by layer0_of_row [rows]; the mask rows are the scored ones. x0, d_h0:
  // its input norm's rows (the norm works row by row: only these are normalised).
  Scratch<int32_t> layer0_rows, layer0_of_row;
  Fp32OrBf16 h0, qkv0, d_qkv0;
  Scratch<float> x0, d_h0, sum_partials;
  MaskRows mask_rows() {
    return {.distinct = blocks + 1,
            .rows = layer0_rows.get(),
            .of_row = layer0_of_row.get(),
            .mask_rows = scored_rows.get(),
            .mask_count = scored,
            .x0 = &x0,
            .d_h0 = &d_h0,
            .h0 = &h0,
            .qkv0 = &qkv0,
            .d_qkv0 = &d_qkv0,
            .sum_partials = sum_partials.get()};
  }
  ScoredRows scored_only() const { return {scored, scored_rows.get(), scored_of_row.get()}; }
  // The query-side attention kernels' block order (longest_context_first), after the
  // context ranges in `context`.
  int32_t* block_order() const { return context.get() + 2 * blocks; }
  Scratch<BlockKeyTile> tiles;
  // The tensor-core block attention (bf16 mode, a head_dim it takes): its key-side plan and
  // workspace instead of the fp32 kernel's tiles.
  bool bf16_attention = false;
  size_t key_work_count = 0, key_sum_count = 0;
  Scratch<BlockKeyWork> key_work;
  Scratch<BlockKeySum> key_sums;
  Scratch<unsigned char> attention_workspace;
  // The features as fc and its weight gradient read them: `features` (fp32, from the host or
  // widened from the ring's bf16), or the ring's bf16 themselves in bf16 mode.
  Operand feature_operand;
  Scratch<float> features, ctx_pre, ctx_cos, ctx_sin, block_cos, block_sin, x_final, row_loss,
      row_weight;
  // The normalised context, the final norm's output [scored, d] (the head's operand), and a
  // chunk's logits (bf16 in bf16 mode, as autocast's head product makes them; the
  // cross-entropy overwrites them with their gradient).
  Fp32OrBf16 ctx, head_in, logits;
  std::vector<LayerActivations> acts;
  DrafterLayerGradients grads;  // the layers' gradient scratch
  Scratch<float> d_final, d_x, d_ctx_k, d_ctx_v, d_ctx, norm_partials, delta;
  // The last layer's d_x over the scored rows, before it goes back to every block row.
  Scratch<float> d_x_scored;
  // bf16 mode: d_x (and d_x_scored) as the norms' backward writes it beside the fp32 one,
  // for the products that read it (held).
  Scratch<uint16_t> d_x_bf16, d_x_scored_bf16;
  // A gradient that only its product reads.
  Fp32OrBf16 d_ctx_pre;
  // The gradients of the context's projections side by side, as the block rows' are
  // (DrafterLayerGradients::d_qkv), so that their input gradient is one product with the
  // adjacent weights (dflash_projections_adjacent): the context's [dk | dv] of every layer
  // [ctx_rows, layers * 2 kv], layer after layer, times every layer's [Wk; Wv] stacked
  // (w_ctx_kv, copied from the weights at each step). One product over the layers writes
  // d_ctx once instead of ten adding to it.
  Fp32OrBf16 d_ctx_kv, w_ctx_kv;
  bool bf16() const { return gemm.precision() == GemmPrecision::kBf16; }

  // A step's host arrays go to the device through page-locked memory: a copy from pageable
  // memory may wait for the stream (the driver stages it), which would leave the GPU idle
  // behind every copy while the host queues the next. staged_copies marks when the last
  // step's copies have left it.
  gpu::PinnedBuffer staging;
  gpu::Event staged_copies = gpu::make_event(cudaEventDisableTiming);
  struct HostCopy {
    void* dst;
    const void* src;
    size_t bytes;
  };
  void copy_to_device(std::initializer_list<HostCopy> copies) {
    const auto padded = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
    size_t total = 0;
    for (const HostCopy& c : copies) total += padded(c.bytes);
    HSRING_CUDA_CHECK(cudaEventSynchronize(staged_copies.get()));
    if (staging.size() < total) staging = gpu::PinnedBuffer::allocate(2 * total);
    std::byte* at = staging.data();
    for (const HostCopy& c : copies) {
      if (c.bytes == 0) continue;  // the path not taken leaves its arrays unallocated
      std::memcpy(at, c.src, c.bytes);
      HSRING_CUDA_CHECK(cudaMemcpyAsync(c.dst, at, c.bytes, cudaMemcpyHostToDevice, stream.get()));
      at += padded(c.bytes);
    }
    HSRING_CUDA_CHECK(cudaEventRecord(staged_copies.get(), stream.get()));
  }

  // Phase timing: events[0] opens the step, events[i] closes phase names[i].
  bool timing = false;
  std::vector<gpu::Event> events;
  std::vector<const char*> names;
  size_t marks = 0;

  float* p(size_t offset) const { return state->params(offset); }
  float* g(size_t offset) const { return state->grads(offset); }
  // The layers' launches and products (train/cuda_drafter_layer.h). In bf16 mode the
  // matrices' gradients are the bf16 products' own, as autocast's
  // (FlatState::keep_bf16_gradients).
  DrafterLayerStep step() {
    return {gemm, *state, stream.get(), shape, bf16(), norm_partials.get()};
  }
};

CudaDflashTrainer::CudaDflashTrainer(const DflashTrainerOptions& options, GemmPrecision precision,
                                     size_t max_logit_values)
    : options_(without_target(options)), config_(options.model) {
  check_dflash_config(config_);
  if (!block_attention_supported(config_.head_dim))
    throw Error(Errc::kModelBadConfig,
                fmt::format("dflash head_dim {} is not supported on the GPU (a multiple of 32 up "
                            "to 256); train this drafter on the CPU",
                            config_.head_dim));
  const size_t want = size_t(config_.vocab_size) * config_.width();
  const bool tied = options.lm_head.empty();
  for (const auto& [values, name] :
       {std::pair{&options.embed, "embedding"}, {tied ? &options.embed : &options.lm_head, "head"}})
    if (values->size() != want)
      throw Error(Errc::kModel,
                  fmt::format("dflash: the target's {} holds {} values, [{}, {}] needs {}", name,
                              values->size(), config_.vocab_size, config_.width(), want));
  layout_ = dflash_param_layout(config_);
  std::vector<float> host(layout_.total, 0.0f);
  init_dflash_params<float>(layout_, options.seed, host);

  b_ = std::make_unique<Buffers>(precision);
  b_->max_logit_values = max_logit_values;
  Buffers& b = *b_;
  b.bf16_attention =
      precision == GemmPrecision::kBf16 && block_attention_bf16_supported(config_.head_dim);
  b.shape = {.layer = dflash_layer_shape(config_),
             .bf16 = precision == GemmPrecision::kBf16,
             .bf16_attention = b.bf16_attention};
  cudaStream_t s = b.stream.get();
  b.state = std::make_unique<FlatState>(layout_, options.optimizer, host, s);
  if (precision == GemmPrecision::kBf16) {
    b.state->keep_bf16_params();
    b.state->keep_bf16_gradients();
  }
  const auto upload = [s](gpu::DeviceBuffer& dst, const void* src, size_t bytes) {
    dst = gpu::DeviceBuffer::allocate(bytes);
    HSRING_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src, bytes, cudaMemcpyHostToDevice, s));
  };
  upload(b.embed, options.embed.data(), want * sizeof(float));
  if (!tied) upload(b.lm_head, options.lm_head.data(), want * sizeof(float));
  b.head = tied ? b.embed.as<float>() : b.lm_head.as<float>();
  const std::vector<double> inv_freq =
      ops::rope_inverse_frequencies(config_.head_dim, config_.rope_theta);
  upload(b.inv_freq, inv_freq.data(), inv_freq.size() * sizeof(double));
  b.gemm.keep_bf16_copy(b.head, want);  // frozen: rounded once, not at every product

  const auto offset = [this](const std::string& name) { return layout_.at(name).offset; };
  b.fc = offset("fc.weight");
  b.hidden_norm = offset("hidden_norm.weight");
  b.norm = offset("norm.weight");
  b.at = dflash_layer_offsets(layout_, config_.num_layers);
  if (!dflash_projections_adjacent(config_, b.at))
    throw Error(Errc::kModelBadConfig,
                fmt::format("dflash on the GPU multiplies each layer's q, k and v projections as "
                            "one matrix, which needs num_kv_heads x head_dim x width ({} x {}) to "
                            "be a multiple of {}; change the width or the heads, or train this "
                            "drafter on the CPU",
                            config_.kv_dim(), config_.width(), kParamAlignment));
  b.acts.resize(config_.num_layers);
  HSRING_CUDA_CHECK(cudaStreamSynchronize(s));  // the host copies may go now
}

CudaDflashTrainer::~CudaDflashTrainer() {
  if (b_) (void)cudaStreamSynchronize(b_->stream.get());
}

std::string CudaDflashTrainer::describe() const {
  return train::describe(config_) + ", labels " + to_string(options_.labels);
}

void CudaDflashTrainer::set_phase_timing(bool on) {
  b_->timing = on;
  b_->marks = 0;
}

void CudaDflashTrainer::mark(const char* phase) {
  Buffers& b = *b_;
  if (!b.timing) return;
  if (b.marks == b.events.size()) {
    b.events.push_back(gpu::make_event());
    b.names.push_back(nullptr);
  }
  b.names[b.marks] = phase;
  HSRING_CUDA_CHECK(cudaEventRecord(b.events[b.marks].get(), b.stream.get()));
  ++b.marks;
}

std::vector<std::pair<std::string, double>> CudaDflashTrainer::phase_ms() const {
  const Buffers& b = *b_;
  std::vector<std::pair<std::string, double>> out;
  if (b.marks < 2) return out;
  HSRING_CUDA_CHECK(cudaEventSynchronize(b.events[b.marks - 1].get()));
  for (size_t i = 1; i < b.marks; ++i) {
    const double ms = gpu::elapsed_ms(b.events[i - 1].get(), b.events[i].get());
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const auto& entry) { return entry.first == b.names[i]; });
    if (it == out.end())
      out.emplace_back(b.names[i], ms);
    else
      it->second += ms;
  }
  return out;
}

cudaStream_t CudaDflashTrainer::stream() const { return b_->stream.get(); }
FlatState& CudaDflashTrainer::flat_state() const { return *b_->state; }

LossStats CudaDflashTrainer::compute_gradients(const DrafterBatch& batch) {
  return run(batch, Features::kHostFp32, batch.features.data());
}

LossStats CudaDflashTrainer::compute_gradients_bf16(const uint16_t* features,
                                                    const DrafterBatch& batch) {
  return run(batch, Features::kDeviceBf16, features);
}

std::vector<int32_t> CudaDflashTrainer::draft(const DrafterBatch& batch,
                                              std::span<const int32_t> anchors, uint32_t block_size,
                                              const float* device_features,
                                              std::vector<float>* logits) {
  Buffers& b = *b_;
  if (b.bf16())
    throw Error(Errc::kModelBadConfig,
                "dflash drafting needs the fp32 precision: its argmax "
                "reads fp32 logits");
  if (block_size < 2 || block_size > options_.model.block_size)
    throw Error(Errc::kModel, fmt::format("dflash drafting: a block of {} rows, not 2 .. {}",
                                          block_size, options_.model.block_size));
  if (anchors.empty()) return {};
  // The blocks' rows and kernels read config_.block_size: a shorter block for this call only.
  struct RestoreBlockSize {
    DflashConfig& config;
    uint32_t block_size;
    ~RestoreBlockSize() { config.block_size = block_size; }
  } restore{config_, config_.block_size};
  config_.block_size = block_size;
  b.marks = 0;
  mark("start");
  b.gemm.release_holds();
  labels_.assign(batch.rows(), kIgnoreLabel);
  anchors_.assign(anchors.begin(), anchors.end());
  DflashBatch blocks = dflash_batch(batch, labels_, anchors_);
  blocks.features = {};
  validate_dflash_metadata(blocks, config_);
  upload_context(batch, Features::kDeviceFp32, device_features);
  run_context_forward();
  build_dflash_block_rows(blocks, config_, rows_);
  upload(batch);
  b.drafted.ensure(b.scored);
  if (logits) logits->resize(b.scored * size_t(config_.vocab_size));
  b.drafting = true;
  b.drafted_logits = logits ? logits->data() : nullptr;
  run_forward();
  run_head();
  b.drafting = false;
  b.drafted_logits = nullptr;
  std::vector<int32_t> drafted(b.scored);
  HSRING_CUDA_CHECK(cudaMemcpyAsync(drafted.data(), b.drafted.get(), b.scored * sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, b.stream.get()));
  HSRING_CUDA_CHECK(cudaStreamSynchronize(b.stream.get()));
  mark("drafted");
  return drafted;
}

LossStats CudaDflashTrainer::run(const DrafterBatch& batch, Features source, const void* features) {
  b_->drafting = false;  // a draft() that threw mid-way must not leave its head behind
  b_->drafted_logits = nullptr;
  b_->marks = 0;
  mark("start");
  // Holds live for one step, and only this step's products read them: the last step's end
  // here. The weights change only in apply_gradients, which also writes their bf16 copy:
  // it serves every product of the step (each weight is read by a forward and a
  // backward_input product).
  b_->gemm.release_holds();
  b_->gemm.hold_bf16(b_->state->params(), layout_.total, b_->state->params_bf16());
  // The CPU trainer's labels and anchors: the same blocks at the same step. The context
  // needs only the features and positions: its products (a few ms) run while the host
  // draws the anchors and lays out the blocks, which the GPU would otherwise wait for. The
  // batch is checked before anything is enqueued, then again with its anchors.
  build_dflash_labels(batch, options_.labels, labels_);
  {
    const DflashBatch unanchored = dflash_batch(batch, labels_, {});
    if (source == Features::kHostFp32)
      validate_dflash_batch(unanchored, config_);
    else
      validate_dflash_metadata(unanchored, config_);
  }
  upload_context(batch, source, features);
  run_context_forward();
  anchors_ = dflash_step_anchors(batch, labels_, config_, options_.anchors, options_.seed,
                                 b_->state->step());
  if (anchors_.empty()) {
    b_->state->zero_gradients();
    last_ = DflashStats{};
    HSRING_CUDA_CHECK(cudaStreamSynchronize(b_->stream.get()));
    return dflash_loss_stats(last_, batch.rows());
  }
  const DflashBatch blocks = dflash_batch(batch, labels_, anchors_);
  validate_dflash_anchors(blocks, config_);
  build_dflash_block_rows(blocks, config_, rows_);
  upload(batch);
  // A step that trains writes each matrix's gradient with its first product (backward_weight
  // not accumulating): only the vectors (the norms' weights), which kernels add to, start
  // from zero. That spares a pass over all 4 bytes a parameter, and each first product's
  // read of its output. In bf16 mode the matrices' gradients are the products' bf16
  // (Buffers::step).
  if (b_->backward) {
    b_->state->zero_vector_gradients();
    if (b_->bf16()) b_->state->matrix_gradients_in_bf16();
  } else {
    b_->state->zero_gradients();
  }
  mark("upload (host labels, anchors, copies)");
  run_forward();
  run_head();
  if (b_->backward) run_backward();
  last_ = gather_stats();
  mark("stats");
  return dflash_loss_stats(last_, batch.rows());
}

void CudaDflashTrainer::upload_context(const DrafterBatch& batch, Features source,
                                       const void* features) {
  const DflashConfig& c = config_;
  Buffers& b = *b_;
  cudaStream_t s = b.stream.get();
  const size_t t = batch.rows(), d = c.width(), fd = c.feature_dim(), half = c.head_dim / 2;
  b.ctx_rows = t;
  b.positions.ensure(t);
  for (auto* buffer : {&b.ctx_pre, &b.d_ctx}) buffer->ensure(t * d);
  b.d_ctx_pre.ensure(t * d, b.bf16());
  b.ctx.ensure(t * d, b.bf16());
  for (auto* buffer : {&b.ctx_cos, &b.ctx_sin}) buffer->ensure(t * half);
  b.copy_to_device({{b.positions.get(), batch.positions.data(), t * sizeof(int32_t)}});
  // The features feed two products (fc and its weight gradient), nothing else.
  if (source == Features::kHostFp32) {
    b.features.ensure(t * fd);
    HSRING_CUDA_CHECK(cudaMemcpyAsync(b.features.get(), features, t * fd * sizeof(float),
                                      cudaMemcpyHostToDevice, s));
    b.gemm.hold_bf16(b.features.get(), t * fd);
    b.feature_operand = b.features.get();
  } else if (source == Features::kDeviceFp32) {
    b.feature_operand = static_cast<const float*>(features);
  } else if (b.bf16()) {
    // The ring's bf16 are the products' operands as they stand: never widened.
    b.feature_operand = static_cast<const uint16_t*>(features);
  } else {
    b.features.ensure(t * fd);
    HSRING_CUDA_CHECK(gpu::launch_bf16_to_float(static_cast<const uint16_t*>(features), t * fd,
                                                b.features.get(), s));
    b.feature_operand = b.features.get();
  }
  HSRING_CUDA_CHECK(gpu::launch_rope_table(b.positions.get(), uint32_t(t), b.inv_freq.as<double>(),
                                           nullptr, 1.0, uint32_t(half), b.ctx_cos.get(),
                                           b.ctx_sin.get(), s));
}

void CudaDflashTrainer::upload(const DrafterBatch& batch) {
  const DflashConfig& c = config_;
  Buffers& b = *b_;
  cudaStream_t s = b.stream.get();
  const size_t bs = c.block_size, d = c.width(), qd = c.q_dim();
  const size_t kvd = c.kv_dim(), heads = c.num_heads;
  const size_t half = c.head_dim / 2;
  const size_t t = batch.rows(), blocks = anchors_.size(), rows = blocks * bs;
  const size_t scored = blocks * (bs - 1);
  b.blocks = blocks;
  b.rows = rows;
  b.scored = scored;
  b.head_rows = std::max<size_t>(1, std::min(scored, b.max_logit_values / c.vocab_size));

  // Host side: the context ranges, the scored rows, their labels and loss weights.
  context_.resize(2 * blocks);
  for (size_t i = 0; i < blocks; ++i) {
    context_[2 * i] = int32_t(rows_.context[i].begin);
    context_[2 * i + 1] = int32_t(rows_.context[i].end);
  }
  std::vector<int32_t> scored_rows(scored), scored_labels(scored), scored_of_row(rows, -1);
  std::vector<int32_t> layer0_rows(blocks + 1), layer0_of_row(rows);
  for (size_t i = 0; i < blocks; ++i) layer0_rows[i] = int32_t(i * bs);
  layer0_rows[blocks] = 1;  // block 0's first mask row: every mask row's input
  for (size_t r = 0; r < rows; ++r) layer0_of_row[r] = int32_t(r % bs == 0 ? r / bs : blocks);
  std::vector<float> weights(scored);
  double total_weight = 0;
  for (size_t i = 0; i < scored; ++i) {
    const size_t r = i / (bs - 1) * bs + i % (bs - 1) + 1;
    scored_rows[i] = int32_t(r);
    scored_of_row[r] = int32_t(i);
    scored_labels[i] = rows_.labels[r];
    if (rows_.labels[r] >= 0) total_weight += rows_.weights[r];
  }
  // The gradient of the weighted mean: a counted row weighs w_j / sum(w).
  for (size_t i = 0; i < scored; ++i)
    weights[i] = total_weight > 0 ? float(rows_.weights[size_t(scored_rows[i])] / total_weight) : 0;
  b.backward = total_weight > 0;
  const BlockAttentionShape shape = dflash_attention_shape(c, blocks, t);
  std::vector<BlockKeyTile> tiles;
  BlockKeyPlan plan;
  std::vector<int32_t> order;  // the query side's blocks, longest context first
  if (b.bf16_attention) {
    plan = block_key_plan(context_.data(), shape);
    order = longest_context_first(context_.data(), uint32_t(blocks));
    b.key_work_count = plan.work.size();
    b.key_sum_count = plan.sums.size();
    b.key_work.ensure_varying(plan.work.size());
    b.key_sums.ensure_varying(std::max<size_t>(1, plan.sums.size()));
    b.attention_workspace.ensure_varying(
        block_attention_bf16_workspace_bytes(shape, plan.partial_slots));
  } else {
    tiles = block_key_tiles(context_.data(), shape);
  }
  b.tiles_count = tiles.size();

  for (auto* buffer : {&b.block_tokens, &b.block_positions, &b.scored_of_row, &b.layer0_of_row})
    buffer->ensure(rows);
  const size_t layer0 = blocks + 1, qkv = qd + 2 * kvd;
  b.layer0_rows.ensure(layer0);
  b.h0.ensure(layer0 * d, b.bf16());
  b.qkv0.ensure(layer0 * qkv, b.bf16_attention);  // the attention's inputs' precision
  b.d_qkv0.ensure(layer0 * qkv, b.bf16());
  for (auto* buffer : {&b.x0, &b.d_h0}) buffer->ensure(layer0 * d);
  b.sum_partials.ensure(kSumRowChunks * qkv);
  b.context.ensure(3 * blocks);  // the context ranges, then the blocks longest first
  for (auto* buffer : {&b.scored_rows, &b.scored_labels, &b.row_agreed}) buffer->ensure(scored);
  for (auto* buffer : {&b.row_loss, &b.row_weight}) buffer->ensure(scored);
  b.tiles.ensure_varying(std::max<size_t>(1, tiles.size()));
  for (auto* buffer : {&b.block_cos, &b.block_sin}) buffer->ensure(rows * half);
  b.d_x.ensure(rows * d);
  for (auto* buffer : {&b.x_final, &b.d_final, &b.d_x_scored}) buffer->ensure(scored * d);
  if (b.bf16()) {
    b.d_x_bf16.ensure(rows * d);
    b.d_x_scored_bf16.ensure(scored * d);
  }
  b.acts.back().attn_scored.ensure(scored * qd, b.bf16_attention);
  for (size_t layer = 0; layer < b.acts.size(); ++layer) {
    Buffers::LayerActivations& a = b.acts[layer];
    a.mid_in_place = layer == 0 && b.acts.size() > 1;
    a.ensure(b.shape, rows, layer == 0);  // layer 0: MaskRows
    a.ctx_k_raw.ensure(t * kvd, b.bf16());
    if (b.bf16_attention) {
      for (auto* buffer : {&a.ctx_k_bf16, &a.ctx_v_bf16}) buffer->ensure(t * kvd);
    } else {
      for (auto* buffer : {&a.ctx_k, &a.ctx_v}) buffer->ensure(t * kvd);
    }
  }
  b.grads.ensure(b.shape, rows, scored);
  b.d_ctx_kv.ensure(t * c.num_layers * 2 * kvd, b.bf16());
  b.w_ctx_kv.ensure(c.num_layers * 2 * kvd * d, b.bf16());
  for (auto* buffer : {&b.d_ctx_k, &b.d_ctx_v}) buffer->ensure(t * kvd);
  b.norm_partials.ensure(size_t(gpu::kRmsNormBackwardBlocks) * d);
  b.delta.ensure(rows * heads);
  b.head_in.ensure(scored * d, b.bf16());
  b.logits.ensure(b.head_rows * c.vocab_size, b.bf16());

  b.copy_to_device({
      {b.block_tokens.get(), rows_.tokens.data(), rows * sizeof(int32_t)},
      {b.block_positions.get(), rows_.positions.data(), rows * sizeof(int32_t)},
      {b.context.get(), context_.data(), context_.size() * sizeof(int32_t)},
      {b.block_order(), order.data(), order.size() * sizeof(int32_t)},
      {b.scored_rows.get(), scored_rows.data(), scored * sizeof(int32_t)},
      {b.scored_of_row.get(), scored_of_row.data(), rows * sizeof(int32_t)},
      {b.layer0_rows.get(), layer0_rows.data(), layer0_rows.size() * sizeof(int32_t)},
      {b.layer0_of_row.get(), layer0_of_row.data(), rows * sizeof(int32_t)},
      {b.scored_labels.get(), scored_labels.data(), scored * sizeof(int32_t)},
      {b.row_weight.get(), weights.data(), scored * sizeof(float)},
      {b.tiles.get(), tiles.data(), tiles.size() * sizeof(BlockKeyTile)},
      {b.key_work.get(), plan.work.data(), plan.work.size() * sizeof(BlockKeyWork)},
      {b.key_sums.get(), plan.sums.data(), plan.sums.size() * sizeof(BlockKeySum)},
  });
  HSRING_CUDA_CHECK(gpu::launch_rope_table(b.block_positions.get(), uint32_t(rows),
                                           b.inv_freq.as<double>(), nullptr, 1.0, uint32_t(half),
                                           b.block_cos.get(), b.block_sin.get(), s));
}

void CudaDflashTrainer::run_context_forward() {
  const DflashConfig& c = config_;
  Buffers& b = *b_;
  const DrafterLayerStep step = b.step();
  const size_t t = b.ctx_rows, d = c.width();
  // Every captured row, projected and normalised once for all layers.
  b.gemm.forward(b.feature_operand, t, c.feature_dim(), b.p(b.fc), d, b.ctx_pre.get());
  step.norm(b.ctx_pre.get(), b.p(b.hidden_norm), t, d, b.ctx);  // read by 4 products a layer
  mark("fwd context fc + norm");
}

void CudaDflashTrainer::run_forward() {
  const DflashConfig& c = config_;
  Buffers& b = *b_;
  const DrafterLayerStep step = b.step();
  const size_t rows = b.rows, d = c.width();
  // The blocks: the anchor's embedding, then the mask token's.
  HSRING_CUDA_CHECK(gpu::launch_gather_rows(b.embed.as<float>(), b.block_tokens.get(),
                                            uint32_t(rows), uint32_t(d), b.acts[0].x_in.get(),
                                            step.stream()));
  for (uint32_t layer = 0; layer < c.num_layers; ++layer) layer_forward(layer);
  step.norm(b.x_final.get(), b.p(b.norm), b.scored, d, b.head_in);  // the scored rows only
  mark("fwd o_proj + mlp");
}

// One layer of the shared description (train/cuda_drafter_layer.h) with DFlash's variants:
// layer 0's mask rows, the last layer's scored rows, and the block attention, whose keys
// and values are the context's (projected with the block rows' k and v weights and k_norm)
// and the block's.
void CudaDflashTrainer::layer_forward(uint32_t layer) {
  const DflashConfig& c = config_;
  Buffers& b = *b_;
  Gemm& gemm = b.gemm;
  const DrafterLayerStep step = b.step();
  const size_t t = b.ctx_rows, rows = b.rows, d = c.width(), qd = c.q_dim(), kvd = c.kv_dim();
  const uint32_t kv = c.num_kv_heads;
  const DrafterLayerOffsets& o = b.at[layer];
  Buffers::LayerActivations& a = b.acts[layer];
  const bool last = layer + 1 == c.num_layers;

  // The block rows' queries, keys and values. Layer 0's x_in is the residual o_proj adds to
  // (mid_in_place); another's input norm also copies x_in into x_mid, the residual, except
  // in the last layer, whose x_mid holds the scored rows only.
  const MaskRows mask_rows = b.mask_rows();
  step.attention_inputs_forward(o, a, rows, b.block_cos.get(), b.block_sin.get(),
                                layer == 0 || last ? nullptr : a.x_mid.get(),
                                layer == 0 ? &mask_rows : nullptr);
  // The context's keys and values with the same projections and k_norm; the context is the
  // normalised projection itself, not passed through input_layernorm.
  forward_into(gemm, b.ctx.operand(), t, d, b.p(o.k), kvd, a.ctx_k_raw);
  step.qk_norm_rope(a.ctx_k_raw, b.p(o.k_norm), t, kv, b.ctx_cos.get(), b.ctx_sin.get(),
                    a.ctx_k.get(), a.ctx_k_bf16.get());
  forward_into(gemm, b.ctx.operand(), t, d, b.p(o.v), kvd, a.ctx_v.get(), a.ctx_v_bf16.get());
  mark("fwd q/k/v (block + context)");

  const BlockAttentionShape shape = dflash_attention_shape(c, b.blocks, t);
  // attn is read by the output projection and its weight gradient: the bf16 attention
  // writes only their bf16 operand, the fp32 one's is held.
  if (b.bf16_attention) {
    HSRING_CUDA_CHECK(launch_block_attention_forward_bf16(
        a.attention_bf16(), b.context.get(), shape, b.attention_workspace.get(), nullptr,
        a.lse.get(), step.stream(), a.attn.bf16.get(), b.block_order()));
  } else {
    HSRING_CUDA_CHECK(launch_block_attention_forward(
        a.q.get(), a.ctx_k.get(), a.ctx_v.get(), a.k.get(), a.v.get(), b.context.get(), shape,
        a.attn.fp32.get(), a.lse.get(), step.stream()));
    gemm.hold_bf16(a.attn.fp32.get(), rows * qd);
  }
  mark("fwd block attention");

  // Past the attention the rows are independent: the last layer goes on with the scored
  // rows only.
  const ScoredRows scored = b.scored_only();
  const size_t n = step.attention_output_forward(o, a, rows, last ? &scored : nullptr);
  step.mlp_forward(o, a, n, last ? b.x_final.get() : b.acts[layer + 1].x_in.get());
  mark("fwd o_proj + mlp");
}

void CudaDflashTrainer::run_head() {
  Buffers& b = *b_;
  cudaStream_t s = b.stream.get();
  const size_t d = config_.width(), vocab = config_.vocab_size;
  for (size_t s0 = 0; s0 < b.scored; s0 += b.head_rows) {
    const size_t n = std::min(b.head_rows, b.scored - s0);
    forward_into(b.gemm, b.head_in.operand(s0 * d), n, d, b.head, vocab, b.logits);
    mark("head logits");
    if (b.drafting) {
      HSRING_CUDA_CHECK(gpu::launch_argmax(b.logits.fp32.get(), uint32_t(n), uint32_t(vocab),
                                           b.drafted.get() + s0, s));
      // On the stream before the next chunk's product overwrites the buffer.
      if (b.drafted_logits)
        HSRING_CUDA_CHECK(cudaMemcpyAsync(b.drafted_logits + s0 * vocab, b.logits.fp32.get(),
                                          n * vocab * sizeof(float), cudaMemcpyDeviceToHost, s));
      continue;
    }
    const auto cross_entropy = [&](auto* logits) {
      return launch_cross_entropy(logits, b.scored_labels.get() + s0, uint32_t(n), uint32_t(vocab),
                                  1.0f, b.backward, b.row_loss.get() + s0, b.row_agreed.get() + s0,
                                  s, b.row_weight.get() + s0);
    };
    HSRING_CUDA_CHECK(b.logits.bf16.get() ? cross_entropy(b.logits.bf16.get())
                                          : cross_entropy(b.logits.fp32.get()));
    mark("head cross-entropy");
    if (!b.backward) continue;
    // The logits now hold d(loss)/d(logits) of these rows; the head itself is frozen.
    b.gemm.backward_input(b.logits.operand(), n, vocab, b.head, d, b.d_final.get() + s0 * d);
    mark("head d(final)");
  }
}

void CudaDflashTrainer::run_backward() {
  const DflashConfig& c = config_;
  Buffers& b = *b_;
  const DrafterLayerStep step = b.step();
  cudaStream_t s = step.stream();
  const size_t t = b.ctx_rows, d = c.width();
  // d_x carries d(loss)/d(residual stream) down the layers (the scored rows' d_x_scored
  // into the last); each layer leaves its context keys' and values' gradients in d_ctx_kv,
  // for one product below.
  step.norm_backward(b.x_final.get(), b.p(b.norm), b.d_final.get(), b.scored, d, b.d_x_scored.get(),
                     false, b.g(b.norm), b.d_x_scored_bf16.get());
  for (uint32_t layer = c.num_layers; layer-- > 0;) layer_backward(layer);
  // d_ctx = every layer's [dk | dv] of the context times its [Wk; Wv]: one product over the
  // layers' columns of d_ctx_kv and their weights stacked, copied from the weights (or
  // their bf16 copy) as they are this step.
  const size_t kv_block = 2 * size_t(c.kv_dim()) * d;  // one layer's [Wk; Wv]
  for (uint32_t layer = 0; layer < c.num_layers; ++layer) {
    const size_t from = b.at[layer].k;
    HSRING_CUDA_CHECK(
        b.bf16()
            ? cudaMemcpyAsync(b.w_ctx_kv.bf16_at(layer * kv_block), b.state->params_bf16() + from,
                              kv_block * sizeof(uint16_t), cudaMemcpyDeviceToDevice, s)
            : cudaMemcpyAsync(b.w_ctx_kv.fp32_at(layer * kv_block), b.p(from),
                              kv_block * sizeof(float), cudaMemcpyDeviceToDevice, s));
  }
  b.gemm.backward_input(b.d_ctx_kv.operand(), t, c.num_layers * 2 * c.kv_dim(),
                        b.w_ctx_kv.operand(), d, b.d_ctx.get());
  mark("bwd context k/v (all layers)");
  // The block input is the target's embedding and the features are the target's states:
  // both frozen. Only the context projection remains.
  step.norm_backward(b.ctx_pre.get(), b.p(b.hidden_norm), b.d_ctx.get(), t, d,
                     b.d_ctx_pre.fp32.get(), false, b.g(b.hidden_norm), b.d_ctx_pre.bf16.get());
  step.weight_gradient(b.d_ctx_pre.operand(), t, d, b.feature_operand, c.feature_dim(), b.fc,
                       false);
  mark("bwd context norm + fc");
}

void CudaDflashTrainer::layer_backward(uint32_t layer) {
  const DflashConfig& c = config_;
  Buffers& b = *b_;
  const DrafterLayerStep step = b.step();
  DrafterLayerGradients& grads = b.grads;
  const size_t t = b.ctx_rows, rows = b.rows, kvd = c.kv_dim();
  const uint32_t kv = c.num_kv_heads;
  const DrafterLayerOffsets& o = b.at[layer];
  const Buffers::LayerActivations& a = b.acts[layer];
  // Past the attention, the last layer's rows are the scored ones (layer_forward), with
  // their own d_x until it goes back to every block row below. bf16 mode: d_x rounded by
  // the norms that write it.
  const bool last = layer + 1 == c.num_layers;
  const ScoredRows scored = b.scored_only();
  const ResidualGradient full{b.d_x.get(), b.d_x_bf16.get()};
  ResidualGradient d_x =
      last ? ResidualGradient{b.d_x_scored.get(), b.d_x_scored_bf16.get()} : full;

  step.mlp_backward(o, a, last ? b.scored : rows, grads, d_x);
  mark("bwd mlp");
  // Layer 0 makes no d_x (its input is the frozen embedding): its residual's is not needed.
  d_x = step.attention_output_backward(o, a, rows, last ? &scored : nullptr, grads, d_x,
                                       layer > 0 ? full : ResidualGradient{});
  mark("bwd o_proj");
  const BlockAttentionShape shape = dflash_attention_shape(c, b.blocks, t);
  if (b.bf16_attention)
    HSRING_CUDA_CHECK(launch_block_attention_backward_bf16(
        a.attention_bf16(), a.attn.bf16.get(), grads.d_attn.get(), a.lse.get(), b.context.get(),
        b.key_work.get(), uint32_t(b.key_work_count), b.key_sums.get(), uint32_t(b.key_sum_count),
        shape, b.attention_workspace.get(), b.delta.get(), grads.d_q.get(), b.d_ctx_k.get(),
        b.d_ctx_v.get(), grads.d_k.get(), grads.d_v.get(), step.stream(), b.block_order()));
  else
    HSRING_CUDA_CHECK(launch_block_attention_backward(
        a.q.get(), a.ctx_k.get(), a.ctx_v.get(), a.k.get(), a.v.get(), a.attn.fp32.get(),
        grads.d_attn.get(), a.lse.get(), b.context.get(), b.tiles.get(), uint32_t(b.tiles_count),
        shape, b.delta.get(), grads.d_q.get(), b.d_ctx_k.get(), b.d_ctx_v.get(), grads.d_k.get(),
        grads.d_v.get(), step.stream()));
  mark("bwd block attention");
  // Undo RoPE, then the per-head norms (k_norm's weight gathers from both key sets). The
  // block rows' gradients go side by side into d_qkv, the context's into this layer's
  // columns of d_ctx_kv (Buffers), in their fp32 or bf16 arrays (Fp32OrBf16).
  step.rotation_backward(o, a, rows, b.block_cos.get(), b.block_sin.get(), grads);
  const size_t ctx_kv = c.num_layers * 2 * kvd, ctx_col = layer * 2 * kvd;
  step.qk_norm_rope_backward(a.ctx_k_raw, b.p(o.k_norm), b.d_ctx_k.get(), t, kv, b.ctx_cos.get(),
                             b.ctx_sin.get(), b.d_ctx_kv, ctx_col, ctx_kv, b.g(o.k_norm));
  step.place_columns(b.d_ctx_v.get(), t, kvd, b.d_ctx_kv, ctx_col + kvd, ctx_kv);

  // The block rows' products (layer 0: its mask rows'). The context's keys and values add
  // theirs to k's and v's weight gradients; its d_ctx waits for every layer (run_backward).
  const MaskRows mask_rows = b.mask_rows();
  step.projections_backward(o, a, rows, layer == 0 ? &mask_rows : nullptr, grads, d_x);
  step.weight_gradient(b.d_ctx_kv.operand(ctx_col), t, 2 * kvd, b.ctx.operand(), c.width(), o.k,
                       true, ctx_kv);
  mark("bwd q/k/v (block + context) + norms");
}

DflashStats CudaDflashTrainer::gather_stats() {
  Buffers& b = *b_;
  const size_t bs = config_.block_size, scored = b.scored;
  std::vector<float> row_loss(scored);
  std::vector<int32_t> row_agreed(scored);
  cudaStream_t s = b.stream.get();
  // After the backward: the step is complete when the loss is known.
  HSRING_CUDA_CHECK(cudaMemcpyAsync(row_loss.data(), b.row_loss.get(), scored * sizeof(float),
                                    cudaMemcpyDeviceToHost, s));
  HSRING_CUDA_CHECK(cudaMemcpyAsync(row_agreed.data(), b.row_agreed.get(), scored * sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, s));
  HSRING_CUDA_CHECK(cudaStreamSynchronize(s));
  DflashStats stats;
  stats.blocks = b.blocks;
  stats.accepted_at.assign(bs, 0);
  double loss_sum = 0;
  for (size_t blk = 0; blk < b.blocks; ++blk) {
    bool accepting = true;
    size_t accepted = 0;
    for (size_t j = 1; j < bs; ++j) {
      const size_t i = blk * (bs - 1) + j - 1, r = blk * bs + j;
      const bool counted = rows_.labels[r] >= 0;
      // agreed is 0 on an ignored label: the prefix stops there, as accepted_prefix does.
      accepting = accepting && row_agreed[i] != 0;
      if (accepting) ++accepted;
      if (!counted) continue;
      ++stats.counted;
      stats.weight += rows_.weights[r];
      loss_sum += rows_.weights[r] * double(row_loss[i]);
      stats.agreed += uint64_t(row_agreed[i]);
    }
    stats.accepted += accepted;
    for (size_t j = 0; j <= accepted; ++j) ++stats.accepted_at[j];
  }
  if (stats.weight > 0) stats.loss = loss_sum / stats.weight;
  stats.acceptance_length = 1.0 + double(stats.accepted) / double(b.blocks);
  return stats;
}

UpdateStats CudaDflashTrainer::apply_gradients() {
  mark("idle before update");
  const UpdateStats stats = CudaDrafterTrainer::apply_gradients();
  mark("adamw (norm, clip, update)");
  return stats;
}

}  // namespace hsring::train
