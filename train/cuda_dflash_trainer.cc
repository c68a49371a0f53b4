#include "train/cuda_dflash_trainer.h"

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
#include "gpu/ops/swiglu.h"
#include "model/cuda_kernels.h"
#include "ops/rope.h"
#include "train/cuda_block_attention.h"
#include "train/cuda_block_attention_bf16.h"
#include "train/cuda_drafter_kernels.h"
#include "train/cuda_flat_state.h"
#include "train/cuda_qk_norm_rope.h"
#include "train/dflash_params.h"

namespace hsring::train {

namespace {

// An array that only products and the element-wise kernels read: fp32 for the fp32 Gemm,
// or bf16, written so by the kernel or product that makes it, for the bf16 one. Only the
// mode's array is allocated.
struct Fp32OrBf16 {
  Scratch<float> fp32;
  Scratch<uint16_t> bf16;
  void ensure(size_t count, bool in_bf16) {
    if (in_bf16)
      bf16.ensure(count);
    else
      fp32.ensure(count);
  }
  // From element `offset` on: the mode's array, the other null.
  float* fp32_at(size_t offset) const { return fp32.get() ? fp32.get() + offset : nullptr; }
  uint16_t* bf16_at(size_t offset) const { return bf16.get() ? bf16.get() + offset : nullptr; }
  Operand operand(size_t offset = 0) const {
    return bf16.get() ? Operand(bf16.get() + offset) : Operand(fp32.get() + offset);
  }
};

// y [rows, out] = x [rows, in] w^T into y_bf16 when given, else into y.
void forward_into(Gemm& gemm, Operand x, size_t rows, size_t in, const float* w, size_t out,
                  float* y, uint16_t* y_bf16) {
  if (y_bf16)
    gemm.forward(x, rows, in, w, out, y_bf16);
  else
    gemm.forward(x, rows, in, w, out, y);
}
// The same into y's array.
void forward_into(Gemm& gemm, Operand x, size_t rows, size_t in, const float* w, size_t out,
                  Fp32OrBf16& y) {
  forward_into(gemm, x, rows, in, w, out, y.fp32.get(), y.bf16.get());
}

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

  // What one layer's backward needs of its forward; x_in is the layer's residual input.
  struct LayerActivations {
    Scratch<float> x_in, q, block_k, block_v, ctx_k, ctx_v, lse, x_mid;
    // x_in + o_proj, the post-attention norm's input: x_mid, except in layer 0 below the
    // last, whose x_in nothing reads once the forward has gathered its distinct rows
    // (Buffers::x0), so o_proj adds into it in place.
    bool mid_in_place = false;
    float* mid() const { return mid_in_place ? x_in.get() : x_mid.get(); }
    // The attention's output: bf16 for the tensor-core attention (its readers are the
    // output projection, its weight gradient and delta, all in bf16), fp32 for the other.
    Fp32OrBf16 attn;
    Fp32OrBf16 h, m, gate, up, act;  // the norms' outputs (layer 0's h: Buffers::h0), the MLP's
    // The q and k projections before QK-norm and RoPE, which read them forward and back
    // (bf16 in bf16 mode, as autocast's projections write them).
    Fp32OrBf16 q_raw, block_k_raw, ctx_k_raw;
    // The block attention's inputs: fp32 (q ... ctx_v above) for the fp32 kernels, or bf16,
    // written so by the kernels and products that make them, for the tensor-core ones. Only
    // the mode's set is allocated; the other's pointers are null.
    Scratch<uint16_t> q_bf16, block_k_bf16, block_v_bf16, ctx_k_bf16, ctx_v_bf16;
    BlockAttentionBf16Inputs attention_bf16() const {
      return {q_bf16.get(), ctx_k_bf16.get(), ctx_v_bf16.get(), block_k_bf16.get(),
              block_v_bf16.get()};
    }
    // The last layer only: the scored rows of the attention's output, in its precision.
    Fp32OrBf16 attn_scored;
  };

  gpu::Stream stream;
  Gemm gemm;
  std::unique_ptr<FlatState> state;
  gpu::DeviceBuffer embed, lm_head;  // the target's, frozen; lm_head empty when tied
  const float* head = nullptr;
  gpu::DeviceBuffer inv_freq;  // double [head_dim / 2]
  size_t fc = 0, hidden_norm = 0, norm = 0;
  std::vector<DflashLayerOffsets> at;

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
  // token's: its q/k/v projections are made for layer0_rows [blocks + 1] (the anchors'
  // rows, then row 1, a mask row), h0 -> qkv0, and copied to every block row by
  // layer0_of_row [rows]; backward, the mask rows' gradients go in as their sum (d_qkv0's
  // last row), since they multiply the same input. x0, d_h0: its input norm's rows (the
  // norm works row by row: only these are normalised).
  Scratch<int32_t> layer0_rows, layer0_of_row;
  Fp32OrBf16 h0, qkv0, d_qkv0;
  Scratch<float> x0, d_h0, sum_partials;
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
  Scratch<float> d_final, d_x, d_h, d_m, d_attn, d_q, d_block_k, d_block_v, d_ctx_k, d_ctx_v, d_ctx,
      norm_partials, delta;
  // The last layer's gradients over the scored rows, before they go back to every block row.
  Scratch<float> d_x_scored, d_attn_scored;
  // bf16 mode: d_x (and d_x_scored) as the norms' backward writes it beside the fp32 one,
  // for the products that read it (held).
  Scratch<uint16_t> d_x_bf16, d_x_scored_bf16;
  // Gradients that only their products read.
  Fp32OrBf16 d_act, d_gate, d_up, d_ctx_pre;
  // The gradients of the projections' outputs side by side, so that each side's input
  // gradient is one product with the adjacent weights (dflash_projections_adjacent): the
  // block rows' [dq | dk | dv] [rows, q + 2 kv] times [Wq; Wk; Wv], and the context's
  // [dk | dv] of every layer [ctx_rows, layers * 2 kv], layer after layer, times every
  // layer's [Wk; Wv] stacked (w_ctx_kv, copied from the weights at each step). One product
  // over the layers writes d_ctx once instead of ten adding to it.
  Fp32OrBf16 d_qkv, d_ctx_kv, w_ctx_kv;
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
  // The gradient of the matrix at `offset`, dy^T x, written or added: bf16 in bf16 mode, as
  // autocast's products make them (FlatState::keep_bf16_gradients), else fp32.
  void weight_gradient(Operand dy, size_t rows, size_t out, Operand x, size_t in, size_t offset,
                       bool accumulate, size_t dy_stride = 0) {
    if (bf16())
      gemm.backward_weight(dy, rows, out, x, in, state->grads_bf16(offset), accumulate, dy_stride);
    else
      gemm.backward_weight(dy, rows, out, x, in, g(offset), accumulate, dy_stride);
  }
};

CudaDflashTrainer::CudaDflashTrainer(const DflashTrainerOptions& options, GemmPrecision precision,
                                     size_t max_logit_values)
    : options_(without_target(options)), config_(options.model) {
  check_dflash_config(config_);
  if (!block_attention_supported(config_.head_dim))
    throw Error(Errc::kModelBadConfig,
                "dflash head_dim " + std::to_string(config_.head_dim) +
                    " is not supported on the GPU (a multiple of 32 up to 256); train "
                    "this drafter on the CPU");
  const size_t want = size_t(config_.vocab_size) * config_.width();
  const bool tied = options.lm_head.empty();
  for (const auto& [values, name] :
       {std::pair{&options.embed, "embedding"}, {tied ? &options.embed : &options.lm_head, "head"}})
    if (values->size() != want)
      throw Error(Errc::kModel, std::string("dflash: the target's ") + name + " holds " +
                                    std::to_string(values->size()) + " values, [" +
                                    std::to_string(config_.vocab_size) + ", " +
                                    std::to_string(config_.width()) + "] needs " +
                                    std::to_string(want));
  layout_ = dflash_param_layout(config_);
  std::vector<float> host(layout_.total, 0.0f);
  init_dflash_params<float>(layout_, options.seed, host);

  b_ = std::make_unique<Buffers>(precision);
  b_->max_logit_values = max_logit_values;
  Buffers& b = *b_;
  b.bf16_attention =
      precision == GemmPrecision::kBf16 && block_attention_bf16_supported(config_.head_dim);
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
                "dflash on the GPU multiplies each layer's q, k and v projections as one matrix, "
                "which needs num_kv_heads x head_dim x width (" +
                    std::to_string(config_.kv_dim()) + " x " + std::to_string(config_.width()) +
                    ") to be a multiple of " + std::to_string(kParamAlignment) +
                    "; change the width or the heads, or train this drafter on the CPU");
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
float* CudaDflashTrainer::device_gradients() { return b_->state->fp32_gradients(); }
uint64_t CudaDflashTrainer::optimizer_step() const { return b_->state->step(); }

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
    throw Error(Errc::kModel, "dflash drafting: a block of " + std::to_string(block_size) +
                                  " rows, not 2 .. " + std::to_string(options_.model.block_size));
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
  const DflashBatch blocks{{}, batch.tokens, batch.positions, batch.doc_offsets, labels_, anchors_};
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
    const DflashBatch unanchored{batch.features,    batch.tokens, batch.positions,
                                 batch.doc_offsets, labels_,      {}};
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
  const DflashBatch blocks{batch.features,    batch.tokens, batch.positions,
                           batch.doc_offsets, labels_,      anchors_};
  validate_dflash_anchors(blocks, config_);
  build_dflash_block_rows(blocks, config_, rows_);
  upload(batch);
  // A step that trains writes each matrix's gradient with its first product (backward_weight
  // not accumulating): only the vectors (the norms' weights), which kernels add to, start
  // from zero. That spares a pass over all 4 bytes a parameter, and each first product's
  // read of its output. In bf16 mode the matrices' gradients are the products' bf16
  // (Buffers::weight_gradient).
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
  const size_t kvd = c.kv_dim(), inter = c.intermediate_size, heads = c.num_heads;
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
  const BlockAttentionDims dims{uint32_t(blocks), c.block_size,   uint32_t(t),
                                c.num_heads,      c.num_kv_heads, c.head_dim};
  std::vector<BlockKeyTile> tiles;
  BlockKeyPlan plan;
  std::vector<int32_t> order;  // the query side's blocks, longest context first
  if (b.bf16_attention) {
    plan = block_key_plan(context_.data(), dims);
    order = longest_context_first(context_.data(), uint32_t(blocks));
    b.key_work_count = plan.work.size();
    b.key_sum_count = plan.sums.size();
    b.key_work.ensure_varying(plan.work.size());
    b.key_sums.ensure_varying(std::max<size_t>(1, plan.sums.size()));
    b.attention_workspace.ensure_varying(
        block_attention_bf16_workspace_bytes(dims, plan.partial_slots));
  } else {
    tiles = block_key_tiles(context_.data(), dims);
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
  for (auto* buffer : {&b.d_x, &b.d_h, &b.d_m}) buffer->ensure(rows * d);
  for (auto* buffer : {&b.x_final, &b.d_final, &b.d_x_scored}) buffer->ensure(scored * d);
  b.d_attn_scored.ensure(scored * qd);
  if (b.bf16()) {
    b.d_x_bf16.ensure(rows * d);
    b.d_x_scored_bf16.ensure(scored * d);
  }
  b.acts.back().attn_scored.ensure(scored * qd, b.bf16_attention);
  for (size_t layer = 0; layer < b.acts.size(); ++layer) {
    Buffers::LayerActivations& a = b.acts[layer];
    a.mid_in_place = layer == 0 && b.acts.size() > 1;
    a.x_in.ensure(rows * d);
    if (!a.mid_in_place) a.x_mid.ensure(rows * d);
    if (layer > 0) a.h.ensure(rows * d, b.bf16());
    a.m.ensure(rows * d, b.bf16());
    a.attn.ensure(rows * qd, b.bf16_attention);
    a.q_raw.ensure(rows * qd, b.bf16());
    a.block_k_raw.ensure(rows * kvd, b.bf16());
    a.ctx_k_raw.ensure(t * kvd, b.bf16());
    if (b.bf16_attention) {
      a.q_bf16.ensure(rows * qd);
      for (auto* buffer : {&a.block_k_bf16, &a.block_v_bf16}) buffer->ensure(rows * kvd);
      for (auto* buffer : {&a.ctx_k_bf16, &a.ctx_v_bf16}) buffer->ensure(t * kvd);
    } else {
      a.q.ensure(rows * qd);
      for (auto* buffer : {&a.block_k, &a.block_v}) buffer->ensure(rows * kvd);
      for (auto* buffer : {&a.ctx_k, &a.ctx_v}) buffer->ensure(t * kvd);
    }
    for (auto* buffer : {&a.gate, &a.up, &a.act}) buffer->ensure(rows * inter, b.bf16());
    a.lse.ensure(rows * heads);
  }
  for (auto* buffer : {&b.d_gate, &b.d_up}) buffer->ensure(rows * inter, b.bf16());
  b.d_qkv.ensure(rows * (qd + 2 * kvd), b.bf16());
  b.d_ctx_kv.ensure(t * c.num_layers * 2 * kvd, b.bf16());
  b.w_ctx_kv.ensure(c.num_layers * 2 * kvd * d, b.bf16());
  b.d_act.ensure(rows * inter, b.bf16());
  for (auto* buffer : {&b.d_attn, &b.d_q}) buffer->ensure(rows * qd);
  for (auto* buffer : {&b.d_block_k, &b.d_block_v}) buffer->ensure(rows * kvd);
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

namespace {

// The launches one step makes, bound to the trainer's stream and epsilon.
struct Ops {
  cudaStream_t s;
  float eps;
  float* norm_partials;  // [kRmsNormBackwardBlocks * width]

  void norm(const float* x, const float* w, size_t rows, size_t dim, float* y) const {
    HSRING_CUDA_CHECK(gpu::launch_rms_norm_forward(x, w, uint32_t(rows), uint32_t(dim), eps, y, s));
  }
  // Into y's array; x_copy, when given, receives x (a residual, copied on the norm's pass).
  void norm(const float* x, const float* w, size_t rows, size_t dim, Fp32OrBf16& y,
            float* x_copy = nullptr) const {
    HSRING_CUDA_CHECK(gpu::launch_rms_norm_forward(x, w, uint32_t(rows), uint32_t(dim), eps,
                                                   y.fp32.get(), s, y.bf16.get(), x_copy));
  }
  // SwiGLU and its backward on the mode's arrays (fp32 or bf16).
  void swiglu(const Fp32OrBf16& gate, const Fp32OrBf16& up, size_t n, Fp32OrBf16& act) const {
    HSRING_CUDA_CHECK(gate.bf16.get() ? gpu::launch_swiglu_forward(gate.bf16.get(), up.bf16.get(),
                                                                   n, nullptr, s, act.bf16.get())
                                      : gpu::launch_swiglu_forward(gate.fp32.get(), up.fp32.get(),
                                                                   n, act.fp32.get(), s));
  }
  void swiglu_backward(const Fp32OrBf16& gate, const Fp32OrBf16& up, const Fp32OrBf16& d_act,
                       size_t n, Fp32OrBf16& d_gate, Fp32OrBf16& d_up) const {
    HSRING_CUDA_CHECK(
        gate.bf16.get()
            ? gpu::launch_swiglu_backward(gate.bf16.get(), up.bf16.get(), d_act.bf16.get(), n,
                                          nullptr, nullptr, s, d_gate.bf16.get(), d_up.bf16.get())
            : gpu::launch_swiglu_backward(gate.fp32.get(), up.fp32.get(), d_act.fp32.get(), n,
                                          d_gate.fp32.get(), d_up.fp32.get(), s));
  }
  // dx of RMSNorm(x) from dy, written or added, into dx, dx_bf16 (for the products that
  // read it) or both; the weight's gradient added to dw. One pass.
  void norm_backward(const float* x, const float* w, const float* dy, size_t rows, size_t dim,
                     float* dx, bool accumulate, float* dw, uint16_t* dx_bf16 = nullptr) const {
    HSRING_CUDA_CHECK(gpu::launch_rms_norm_backward_rows(x, w, dy, uint32_t(rows), uint32_t(dim),
                                                         eps, dx, accumulate, dw, norm_partials, s,
                                                         dx_bf16));
  }
  // Qwen3's per-head norm, then RoPE: y = RoPE(RMSNorm(x) w) over x [rows, heads * hd] in
  // x's array, into y (fp32) or y_bf16, whichever is not null.
  void qk_norm_rope(const Fp32OrBf16& x, const float* w, size_t rows, uint32_t heads, uint32_t hd,
                    const float* cos, const float* sin, float* y, uint16_t* y_bf16) const {
    const auto run = [&](const auto* values) {
      return launch_qk_norm_rope_forward(values, w, uint32_t(rows), heads, hd, eps, cos, sin, y, s,
                                         y_bf16);
    };
    HSRING_CUDA_CHECK(x.bf16.get() ? run(x.bf16.get()) : run(x.fp32.get()));
  }
  // Its backward from dy: dx into dx's columns from dx_col on (its rows dx_stride apart); the
  // weight's gradient added to dw.
  void qk_norm_rope_backward(const Fp32OrBf16& x, const float* w, const float* dy, size_t rows,
                             uint32_t heads, uint32_t hd, const float* cos, const float* sin,
                             const Fp32OrBf16& dx, size_t dx_col, size_t dx_stride,
                             float* dw) const {
    const auto run = [&](const auto* values) {
      return launch_qk_norm_rope_backward(values, w, dy, uint32_t(rows), heads, hd, eps, cos, sin,
                                          dx.fp32_at(dx_col), dx.bf16_at(dx_col), dw, s,
                                          uint32_t(dx_stride));
    };
    HSRING_CUDA_CHECK(x.bf16.get() ? run(x.bf16.get()) : run(x.fp32.get()));
  }
  // Rows index[0..n) of `from`'s columns [col, col + dim) (its rows `stride` apart; 0: dim)
  // into y (fp32) or y_bf16, whichever is not null (a negative index: zeros).
  void gather_rows(const Fp32OrBf16& from, const int32_t* index, size_t n, size_t dim, float* y,
                   uint16_t* y_bf16, size_t col = 0, size_t stride = 0) const {
    const auto run = [&](const auto* values) {
      return gpu::launch_gather_rows(values + col, index, uint32_t(n), uint32_t(dim), y, s, y_bf16,
                                     uint32_t(stride));
    };
    HSRING_CUDA_CHECK(from.bf16.get() ? run(from.bf16.get()) : run(from.fp32.get()));
  }
  // src [rows, cols] into dst's columns from `col` on, its rows `stride` apart, in dst's
  // precision (bf16: rounded).
  void place_columns(const float* src, size_t rows, size_t cols, const Fp32OrBf16& dst, size_t col,
                     size_t stride) const {
    if (dst.bf16.get())
      HSRING_CUDA_CHECK(
          gpu::launch_float_to_bf16_rows(src, rows, cols, dst.bf16.get() + col, stride, s));
    else
      HSRING_CUDA_CHECK(cudaMemcpy2DAsync(dst.fp32.get() + col, stride * sizeof(float), src,
                                          cols * sizeof(float), cols * sizeof(float), rows,
                                          cudaMemcpyDeviceToDevice, s));
  }
};

}  // namespace

void CudaDflashTrainer::run_context_forward() {
  const DflashConfig& c = config_;
  Buffers& b = *b_;
  const Ops ops{b.stream.get(), float(c.rms_norm_eps), b.norm_partials.get()};
  const size_t t = b.ctx_rows, d = c.width();
  // Every captured row, projected and normalised once for all layers.
  b.gemm.forward(b.feature_operand, t, c.feature_dim(), b.p(b.fc), d, b.ctx_pre.get());
  ops.norm(b.ctx_pre.get(), b.p(b.hidden_norm), t, d, b.ctx);  // read by 4 products a layer
  mark("fwd context fc + norm");
}

void CudaDflashTrainer::run_forward() {
  const DflashConfig& c = config_;
  Buffers& b = *b_;
  const Ops ops{b.stream.get(), float(c.rms_norm_eps), b.norm_partials.get()};
  const size_t rows = b.rows, d = c.width();
  // The blocks: the anchor's embedding, then the mask token's.
  HSRING_CUDA_CHECK(gpu::launch_gather_rows(b.embed.as<float>(), b.block_tokens.get(),
                                            uint32_t(rows), uint32_t(d), b.acts[0].x_in.get(),
                                            ops.s));
  for (uint32_t layer = 0; layer < c.num_layers; ++layer) layer_forward(layer);
  ops.norm(b.x_final.get(), b.p(b.norm), b.scored, d, b.head_in);  // the scored rows only
  mark("fwd o_proj + mlp");
}

void CudaDflashTrainer::layer_forward(uint32_t layer) {
  const DflashConfig& c = config_;
  Buffers& b = *b_;
  Gemm& gemm = b.gemm;
  const Ops ops{b.stream.get(), float(c.rms_norm_eps), b.norm_partials.get()};
  const size_t t = b.ctx_rows, rows = b.rows, d = c.width(), qd = c.q_dim(), kvd = c.kv_dim();
  const size_t inter = c.intermediate_size;
  const uint32_t heads = c.num_heads, kv = c.num_kv_heads, hd = c.head_dim;
  const DflashLayerOffsets& o = b.at[layer];
  Buffers::LayerActivations& a = b.acts[layer];
  const bool last = layer + 1 == c.num_layers;

  // Queries of the block rows: per-head RMSNorm before RoPE (Qwen3's QK-norm). The norms'
  // outputs are read by their forward products and again by the backward's weight
  // gradients, in bf16 in bf16 mode (Fp32OrBf16).
  if (layer == 0) {
    // Every mask row's input is the mask token's embedding: the input norm and the
    // projections of the anchors' rows and one mask row, the latter as one product with
    // [Wq; Wk; Wv] (adjacent in the layout), copied to every block row; 1/B of the block
    // rows' q/k/v products. x_in itself is the residual o_proj adds to (mid_in_place).
    const size_t n0 = b.blocks + 1, qkv = qd + 2 * kvd;
    HSRING_CUDA_CHECK(gpu::launch_gather_rows(a.x_in.get(), b.layer0_rows.get(), uint32_t(n0),
                                              uint32_t(d), b.x0.get(), ops.s));
    ops.norm(b.x0.get(), b.p(o.input_norm), n0, d, b.h0);
    forward_into(gemm, b.h0.operand(), n0, d, b.p(o.q), qkv, b.qkv0);
    const int32_t* of_row = b.layer0_of_row.get();
    ops.gather_rows(b.qkv0, of_row, rows, qd, a.q_raw.fp32.get(), a.q_raw.bf16.get(), 0, qkv);
    ops.gather_rows(b.qkv0, of_row, rows, kvd, a.block_k_raw.fp32.get(), a.block_k_raw.bf16.get(),
                    qd, qkv);
    ops.gather_rows(b.qkv0, of_row, rows, kvd, a.block_v.get(), a.block_v_bf16.get(), qd + kvd,
                    qkv);
  } else {
    // The input norm's pass also copies x_in into x_mid: the residual o_proj adds to (the
    // last layer's x_mid holds the scored rows only, gathered below).
    ops.norm(a.x_in.get(), b.p(o.input_norm), rows, d, a.h, last ? nullptr : a.x_mid.get());
    forward_into(gemm, a.h.operand(), rows, d, b.p(o.q), qd, a.q_raw);
    forward_into(gemm, a.h.operand(), rows, d, b.p(o.k), kvd, a.block_k_raw);
    forward_into(gemm, a.h.operand(), rows, d, b.p(o.v), kvd, a.block_v.get(),
                 a.block_v_bf16.get());
  }
  // The attention's inputs go to its fp32 arrays or its bf16 ones (LayerActivations).
  ops.qk_norm_rope(a.q_raw, b.p(o.q_norm), rows, heads, hd, b.block_cos.get(), b.block_sin.get(),
                   a.q.get(), a.q_bf16.get());
  // Keys and values of [context ; block] with the same projections and k_norm; the context
  // is the normalised projection itself, not passed through input_layernorm.
  ops.qk_norm_rope(a.block_k_raw, b.p(o.k_norm), rows, kv, hd, b.block_cos.get(), b.block_sin.get(),
                   a.block_k.get(), a.block_k_bf16.get());
  forward_into(gemm, b.ctx.operand(), t, d, b.p(o.k), kvd, a.ctx_k_raw);
  ops.qk_norm_rope(a.ctx_k_raw, b.p(o.k_norm), t, kv, hd, b.ctx_cos.get(), b.ctx_sin.get(),
                   a.ctx_k.get(), a.ctx_k_bf16.get());
  forward_into(gemm, b.ctx.operand(), t, d, b.p(o.v), kvd, a.ctx_v.get(), a.ctx_v_bf16.get());
  mark("fwd q/k/v (block + context)");

  const BlockAttentionDims dims{uint32_t(b.blocks), c.block_size, uint32_t(t), heads, kv, hd};
  // attn is read by the output projection and its weight gradient: the bf16 attention
  // writes only their bf16 operand, the fp32 one's is held.
  if (b.bf16_attention) {
    HSRING_CUDA_CHECK(launch_block_attention_forward_bf16(
        a.attention_bf16(), b.context.get(), dims, b.attention_workspace.get(), nullptr,
        a.lse.get(), ops.s, a.attn.bf16.get(), b.block_order()));
  } else {
    HSRING_CUDA_CHECK(launch_block_attention_forward(
        a.q.get(), a.ctx_k.get(), a.ctx_v.get(), a.block_k.get(), a.block_v.get(), b.context.get(),
        dims, a.attn.fp32.get(), a.lse.get(), ops.s));
    gemm.hold_bf16(a.attn.fp32.get(), rows * qd);
  }
  mark("fwd block attention");

  // Past the attention, the rows are independent: the last layer takes only the scored
  // ones, which its output, the final norm and the head read; an anchor's row there would
  // reach no loss (1/B of the layer's o_proj and MLP).
  size_t n = rows;
  Operand attention = a.attn.operand();
  float* x_out = last ? b.x_final.get() : b.acts[layer + 1].x_in.get();
  if (last) {
    n = b.scored;
    HSRING_CUDA_CHECK(gpu::launch_gather_rows(a.x_in.get(), b.scored_rows.get(), uint32_t(n),
                                              uint32_t(d), a.x_mid.get(), ops.s));
    ops.gather_rows(a.attn, b.scored_rows.get(), n, qd, a.attn_scored.fp32.get(),
                    a.attn_scored.bf16.get());
    attention = a.attn_scored.operand();
  }
  gemm.forward(attention, n, qd, b.p(o.o), d, a.mid(), true);  // x_in + o

  ops.norm(a.mid(), b.p(o.post_norm), n, d, a.m, x_out);  // x_out = x_mid, then + down
  forward_into(gemm, a.m.operand(), n, d, b.p(o.gate), inter, a.gate);
  forward_into(gemm, a.m.operand(), n, d, b.p(o.up), inter, a.up);
  ops.swiglu(a.gate, a.up, n * inter, a.act);
  gemm.forward(a.act.operand(), n, inter, b.p(o.down), d, x_out, true);
  mark("fwd o_proj + mlp");
}

void CudaDflashTrainer::run_head() {
  Buffers& b = *b_;
  const Ops ops{b.stream.get(), float(config_.rms_norm_eps), b.norm_partials.get()};
  const size_t d = config_.width(), vocab = config_.vocab_size;
  for (size_t s0 = 0; s0 < b.scored; s0 += b.head_rows) {
    const size_t n = std::min(b.head_rows, b.scored - s0);
    forward_into(b.gemm, b.head_in.operand(s0 * d), n, d, b.head, vocab, b.logits);
    mark("head logits");
    if (b.drafting) {
      HSRING_CUDA_CHECK(gpu::launch_argmax(b.logits.fp32.get(), uint32_t(n), uint32_t(vocab),
                                           b.drafted.get() + s0, ops.s));
      // On the stream before the next chunk's product overwrites the buffer.
      if (b.drafted_logits)
        HSRING_CUDA_CHECK(cudaMemcpyAsync(b.drafted_logits + s0 * vocab, b.logits.fp32.get(),
                                          n * vocab * sizeof(float), cudaMemcpyDeviceToHost,
                                          ops.s));
      continue;
    }
    const auto cross_entropy = [&](auto* logits) {
      return launch_cross_entropy(logits, b.scored_labels.get() + s0, uint32_t(n), uint32_t(vocab),
                                  1.0f, b.backward, b.row_loss.get() + s0, b.row_agreed.get() + s0,
                                  ops.s, b.row_weight.get() + s0);
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
  const Ops ops{b.stream.get(), float(c.rms_norm_eps), b.norm_partials.get()};
  const size_t t = b.ctx_rows, d = c.width();
  // d_x carries d(loss)/d(residual stream) down the layers (the scored rows' d_x_scored
  // into the last); each layer leaves its context keys' and values' gradients in d_ctx_kv,
  // for one product below.
  ops.norm_backward(b.x_final.get(), b.p(b.norm), b.d_final.get(), b.scored, d, b.d_x_scored.get(),
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
                              kv_block * sizeof(uint16_t), cudaMemcpyDeviceToDevice, ops.s)
            : cudaMemcpyAsync(b.w_ctx_kv.fp32_at(layer * kv_block), b.p(from),
                              kv_block * sizeof(float), cudaMemcpyDeviceToDevice, ops.s));
  }
  b.gemm.backward_input(b.d_ctx_kv.operand(), t, c.num_layers * 2 * c.kv_dim(),
                        b.w_ctx_kv.operand(), d, b.d_ctx.get());
  mark("bwd context k/v (all layers)");
  // The block input is the target's embedding and the features are the target's states:
  // both frozen. Only the context projection remains.
  ops.norm_backward(b.ctx_pre.get(), b.p(b.hidden_norm), b.d_ctx.get(), t, d,
                    b.d_ctx_pre.fp32.get(), false, b.g(b.hidden_norm), b.d_ctx_pre.bf16.get());
  b.weight_gradient(b.d_ctx_pre.operand(), t, d, b.feature_operand, c.feature_dim(), b.fc, false);
  mark("bwd context norm + fc");
}

void CudaDflashTrainer::layer_backward(uint32_t layer) {
  const DflashConfig& c = config_;
  Buffers& b = *b_;
  Gemm& gemm = b.gemm;
  const Ops ops{b.stream.get(), float(c.rms_norm_eps), b.norm_partials.get()};
  const size_t t = b.ctx_rows, rows = b.rows, d = c.width(), qd = c.q_dim(), kvd = c.kv_dim();
  const size_t inter = c.intermediate_size;
  const uint32_t heads = c.num_heads, kv = c.num_kv_heads, hd = c.head_dim;
  const DflashLayerOffsets& o = b.at[layer];
  const Buffers::LayerActivations& a = b.acts[layer];
  // Past the attention, the last layer's rows are the scored ones (layer_forward), with
  // their own d_x and d_attn until they go back to every block row below.
  const bool last = layer + 1 == c.num_layers;
  const size_t n = last ? b.scored : rows;
  float* d_x = last ? b.d_x_scored.get() : b.d_x.get();
  // bf16 mode: d_x rounded by the norms that write it.
  uint16_t* d_x_bf16 = last ? b.d_x_scored_bf16.get() : b.d_x_bf16.get();
  float* d_attn = last ? b.d_attn_scored.get() : b.d_attn.get();
  const Operand attention = last ? a.attn_scored.operand() : a.attn.operand();

  // Every gradient below feeds two products (the input's and the weight's), so each is held
  // once it is complete; d_x again after each norm adds to it.
  // MLP block: x_out = x_mid + down(silu(gate(m)) * up(m)), m = RMSNorm_post(x_mid).
  gemm.hold_bf16(d_x, n * d, d_x_bf16);
  if (b.d_act.bf16.get())
    gemm.backward_input(d_x, n, d, b.p(o.down), inter, b.d_act.bf16.get());
  else
    gemm.backward_input(d_x, n, d, b.p(o.down), inter, b.d_act.fp32.get());
  b.weight_gradient(d_x, n, d, a.act.operand(), inter, o.down, false);
  ops.swiglu_backward(a.gate, a.up, b.d_act, n * inter, b.d_gate, b.d_up);
  gemm.backward_input(b.d_gate.operand(), n, inter, b.p(o.gate), d, b.d_m.get());
  gemm.backward_input(b.d_up.operand(), n, inter, b.p(o.up), d, b.d_m.get(), true);
  b.weight_gradient(b.d_gate.operand(), n, inter, a.m.operand(), d, o.gate, false);
  b.weight_gradient(b.d_up.operand(), n, inter, a.m.operand(), d, o.up, false);
  ops.norm_backward(a.mid(), b.p(o.post_norm), b.d_m.get(), n, d, d_x, true, b.g(o.post_norm),
                    d_x_bf16);
  mark("bwd mlp");

  // Attention block: x_mid = x_in + attn Wo^T.
  gemm.hold_bf16(d_x, n * d, d_x_bf16);
  gemm.backward_input(d_x, n, d, b.p(o.o), qd, d_attn);
  b.weight_gradient(d_x, n, d, attention, qd, o.o, false);
  if (last) {
    // Back to every block row: an anchor's row takes no gradient from above the attention
    // (its attention output and its residual reach no loss), zeros from the gathers. Layer
    // 0 makes no d_x (its input is the frozen embedding): its residual's is not needed.
    HSRING_CUDA_CHECK(gpu::launch_gather_rows(d_attn, b.scored_of_row.get(), uint32_t(rows),
                                              uint32_t(qd), b.d_attn.get(), ops.s));
    if (layer > 0)
      HSRING_CUDA_CHECK(gpu::launch_gather_rows(d_x, b.scored_of_row.get(), uint32_t(rows),
                                                uint32_t(d), b.d_x.get(), ops.s));
    d_attn = b.d_attn.get();
    d_x = b.d_x.get();
    d_x_bf16 = b.d_x_bf16.get();
  }
  mark("bwd o_proj");
  const BlockAttentionDims dims{uint32_t(b.blocks), c.block_size, uint32_t(t), heads, kv, hd};
  if (b.bf16_attention)
    HSRING_CUDA_CHECK(launch_block_attention_backward_bf16(
        a.attention_bf16(), a.attn.bf16.get(), d_attn, a.lse.get(), b.context.get(),
        b.key_work.get(), uint32_t(b.key_work_count), b.key_sums.get(), uint32_t(b.key_sum_count),
        dims, b.attention_workspace.get(), b.delta.get(), b.d_q.get(), b.d_ctx_k.get(),
        b.d_ctx_v.get(), b.d_block_k.get(), b.d_block_v.get(), ops.s, b.block_order()));
  else
    HSRING_CUDA_CHECK(launch_block_attention_backward(
        a.q.get(), a.ctx_k.get(), a.ctx_v.get(), a.block_k.get(), a.block_v.get(),
        a.attn.fp32.get(), d_attn, a.lse.get(), b.context.get(), b.tiles.get(),
        uint32_t(b.tiles_count), dims, b.delta.get(), b.d_q.get(), b.d_ctx_k.get(), b.d_ctx_v.get(),
        b.d_block_k.get(), b.d_block_v.get(), ops.s));
  mark("bwd block attention");
  // Undo RoPE, then the per-head norms (k_norm's weight gathers from both key sets). The
  // block rows' gradients go side by side into d_qkv, the context's into this layer's
  // columns of d_ctx_kv (Buffers), in their fp32 or bf16 arrays (Fp32OrBf16).
  const size_t qkv = qd + 2 * kvd, ctx_kv = c.num_layers * 2 * kvd, ctx_col = layer * 2 * kvd;
  ops.qk_norm_rope_backward(a.q_raw, b.p(o.q_norm), b.d_q.get(), rows, heads, hd, b.block_cos.get(),
                            b.block_sin.get(), b.d_qkv, 0, qkv, b.g(o.q_norm));
  ops.qk_norm_rope_backward(a.block_k_raw, b.p(o.k_norm), b.d_block_k.get(), rows, kv, hd,
                            b.block_cos.get(), b.block_sin.get(), b.d_qkv, qd, qkv, b.g(o.k_norm));
  ops.place_columns(b.d_block_v.get(), rows, kvd, b.d_qkv, qd + kvd, qkv);
  ops.qk_norm_rope_backward(a.ctx_k_raw, b.p(o.k_norm), b.d_ctx_k.get(), t, kv, hd, b.ctx_cos.get(),
                            b.ctx_sin.get(), b.d_ctx_kv, ctx_col, ctx_kv, b.g(o.k_norm));
  ops.place_columns(b.d_ctx_v.get(), t, kvd, b.d_ctx_kv, ctx_col + kvd, ctx_kv);

  // The block rows: d_h = [dq | dk | dv] [Wq; Wk; Wv], and the three weights' gradients as
  // one [q + 2 kv, d] matrix, written. The context's keys and values add theirs to k's and
  // v's; its d_ctx waits for every layer (run_backward).
  if (layer == 0) {
    // The mask rows multiply one input (layer_forward): their gradients go in as their sum,
    // one row after the anchors' (the weights' gradient and the input norm's weight's
    // are linear in them). The block input is the target's frozen embedding: the input
    // norm's dx is not needed (d_m, free here, takes it).
    const size_t n0 = b.blocks + 1;
    ops.gather_rows(b.d_qkv, b.layer0_rows.get(), b.blocks, qkv, b.d_qkv0.fp32_at(0),
                    b.d_qkv0.bf16_at(0));
    const auto sum = [&](const auto* values) {
      return launch_sum_rows(values, b.scored_rows.get(), uint32_t(b.scored), uint32_t(qkv),
                             b.sum_partials.get(), b.d_qkv0.fp32_at(b.blocks * qkv),
                             b.d_qkv0.bf16_at(b.blocks * qkv), ops.s);
    };
    HSRING_CUDA_CHECK(b.d_qkv.bf16.get() ? sum(b.d_qkv.bf16.get()) : sum(b.d_qkv.fp32.get()));
    gemm.backward_input(b.d_qkv0.operand(), n0, qkv, b.p(o.q), d, b.d_h0.get());
    b.weight_gradient(b.d_qkv0.operand(), n0, qkv, b.h0.operand(), d, o.q, false);
    ops.norm_backward(b.x0.get(), b.p(o.input_norm), b.d_h0.get(), n0, d, b.d_m.get(), false,
                      b.g(o.input_norm));
  } else {
    gemm.backward_input(b.d_qkv.operand(), rows, qkv, b.p(o.q), d, b.d_h.get());
    b.weight_gradient(b.d_qkv.operand(), rows, qkv, a.h.operand(), d, o.q, false);
    ops.norm_backward(a.x_in.get(), b.p(o.input_norm), b.d_h.get(), rows, d, d_x, true,
                      b.g(o.input_norm), d_x_bf16);
  }
  b.weight_gradient(b.d_ctx_kv.operand(ctx_col), t, 2 * kvd, b.ctx.operand(), d, o.k, true, ctx_kv);
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

void CudaDflashTrainer::scale_gradients(float factor) { b_->state->scale_gradients(factor); }
UpdateStats CudaDflashTrainer::apply_gradients() {
  mark("idle before update");
  const UpdateStats stats = b_->state->apply_gradients();
  mark("adamw (norm, clip, update)");
  return stats;
}
std::span<float> CudaDflashTrainer::host_gradients() { return b_->state->host_gradients(); }
void CudaDflashTrainer::host_gradients_changed() { b_->state->host_gradients_changed(); }
std::vector<float> CudaDflashTrainer::params() const { return b_->state->download_params(); }
std::vector<float> CudaDflashTrainer::gradients() const { return b_->state->download_gradients(); }
TrainerState CudaDflashTrainer::state() const { return b_->state->state(); }
void CudaDflashTrainer::load_state(const TrainerState& state) { b_->state->load_state(state); }

}  // namespace hsring::train
