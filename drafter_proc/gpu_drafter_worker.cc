#include "drafter_proc/gpu_drafter_worker.h"

#include <fmt/format.h>

#include <thread>

#include "common/clock.h"
#include "common/log.h"
#include "common/signals.h"
#include "drafter_proc/slot_dma.h"
#include "shm/stage_timer.h"
#include "worker/model_batch_check.h"
#include "worker/synthetic_batch.h"
#include "worker/worker_main.h"

namespace hsring {

namespace {
constexpr auto kClaimSlice = std::chrono::milliseconds(100);

uint64_t ms_to_ns(float ms) { return ms < 0 ? 0 : uint64_t(double(ms) * 1e6); }
}  // namespace

struct GpuDrafterWorker::BatchBuffer {
  gpu::DeviceBuffer hidden;   // [max_tokens, K*H]: what the drafter trains on
  gpu::DeviceBuffer staging;  // kStagedCopy: the K [max_tokens, H] regions as they land
  gpu::DeviceBuffer tokens, positions, doc_offsets, labels;
  gpu::DeviceBuffer verdict;
  gpu::PinnedBuffer verdict_host;
  gpu::Event h2d_start, landed, assembled, compute_start, verified, done;
  // The batch whose GPU work was last enqueued here, until resolve() accounts it.
  bool pending = false;
  bool verify = false;
  bool noise = false;
  uint64_t batch_id = 0;
  uint32_t tokens_count = 0;
  uint64_t step = 0;
};

GpuDrafterWorker::GpuDrafterWorker(WorkerSession& session, const GpuDrafterOptions& options)
    : session_(session),
      ring_(session.ring()),
      options_(options),
      layers_(ring_.shape().num_layers),
      hidden_(ring_.shape().hidden_size),
      elem_(dtype_size(ring_.shape().dtype)),
      model_batches_(ring_.shape().content == PayloadContent::kModel),
      consumer_(session, options.seed) {
  consumer_.set_copy_poller(
      [this](const PendingCopy& pending) { return copy_events_.poll(pending); });
}

GpuDrafterWorker::~GpuDrafterWorker() {
  (void)cudaStreamSynchronize(copy_.get());
  (void)cudaStreamSynchronize(compute_.get());
}

std::unique_ptr<GpuDrafterWorker> GpuDrafterWorker::create(WorkerSession& session,
                                                           const GpuDrafterOptions& options) {
  auto w = std::unique_ptr<GpuDrafterWorker>(new GpuDrafterWorker(session, options));
  const RingShape& s = w->ring_.shape();
  const uint64_t batch_bytes = uint64_t(s.max_tokens) * w->layers_ * w->hidden_ * w->elem_;
  const uint64_t ints = uint64_t(s.max_tokens) * sizeof(int32_t);
  w->copy_ = gpu::make_stream();
  w->compute_ = gpu::make_stream();
  for (auto& b : w->buffers_) {
    b = std::make_unique<BatchBuffer>();
    b->hidden = gpu::DeviceBuffer::allocate(batch_bytes);
    if (options.assembly == GpuDrafterOptions::Assembly::kStagedCopy && s.split_layers)
      b->staging = gpu::DeviceBuffer::allocate(batch_bytes);
    b->tokens = gpu::DeviceBuffer::allocate(ints);
    b->positions = gpu::DeviceBuffer::allocate(ints);
    b->doc_offsets = gpu::DeviceBuffer::allocate(ints + sizeof(int32_t));
    b->labels = gpu::DeviceBuffer::allocate(ints);
    b->verdict = gpu::DeviceBuffer::allocate(sizeof(gpu::VerifyVerdict));
    b->verdict_host = gpu::PinnedBuffer::allocate(sizeof(gpu::VerifyVerdict));
    b->h2d_start = gpu::make_event();
    b->landed = gpu::make_event(cudaEventBlockingSync);
    b->assembled = gpu::make_event();
    b->compute_start = gpu::make_event();
    b->verified = gpu::make_event();
    b->done = gpu::make_event(cudaEventBlockingSync);
  }
  HSRING_CUDA_CHECK(cudaDeviceSynchronize());
  return w;
}

bool GpuDrafterWorker::keep_running() const {
  return !stop_requested() && !launcher_gone() &&
         ring_.header().run_state.load(std::memory_order_acquire) == uint32_t(RunState::kRunning);
}

gpu::CudaStatus GpuDrafterWorker::enqueue_h2d(BatchBuffer& b, const SlotView& batch) {
  HSRING_REQUIRE(batch.in_bounds());
  cudaStream_t stream = copy_.get();
  const uint64_t tokens = batch.rows();
  const uint64_t row_bytes = uint64_t(hidden_) * elem_;
  const bool staged = static_cast<bool>(b.staging.size());
  if (options_.debug_h2d_start_stamps != nullptr) {
    HSRING_CUDA_TRY(gpu::launch_timestamp(
        options_.debug_h2d_start_stamps + batch.batch_id() % options_.debug_stamp_count, stream));
  }
  HSRING_CUDA_TRY(cudaEventRecord(b.h2d_start.get(), stream));
  if (staged && ring_.shape().split_layers) {
    for (uint32_t k = 0; k < layers_; ++k) {
      const std::span<const std::byte> region = batch.region_bytes(k);
      HSRING_CUDA_TRY(cudaMemcpyAsync(b.staging.data() + k * tokens * row_bytes, region.data(),
                                      region.size(), cudaMemcpyHostToDevice, stream));
    }
  } else if (gpu::CudaStatus s = enqueue_slot_features(batch, b.hidden.data(), stream); !s.ok()) {
    return s;
  }
  const auto h2d = [&](gpu::DeviceBuffer& to, std::span<const int32_t> from) {
    return cudaMemcpyAsync(to.data(), from.data(), from.size_bytes(), cudaMemcpyHostToDevice,
                           stream);
  };
  HSRING_CUDA_TRY(h2d(b.tokens, batch.tokens()));
  HSRING_CUDA_TRY(h2d(b.positions, batch.positions()));
  HSRING_CUDA_TRY(h2d(b.doc_offsets, batch.doc_offsets()));
  HSRING_CUDA_TRY(h2d(b.labels, batch.labels()));
  HSRING_CUDA_TRY(cudaEventRecord(b.landed.get(), stream));
  if (staged && ring_.shape().split_layers) {
    for (uint32_t k = 0; k < layers_; ++k) {
      HSRING_CUDA_TRY(cudaMemcpy2DAsync(b.hidden.data() + k * row_bytes, layers_ * row_bytes,
                                        b.staging.data() + k * tokens * row_bytes, row_bytes,
                                        row_bytes, tokens, cudaMemcpyDeviceToDevice, stream));
    }
  }
  HSRING_CUDA_TRY(cudaEventRecord(b.assembled.get(), stream));
  return {};
}

gpu::CudaStatus GpuDrafterWorker::enqueue_compute(BatchBuffer& b) {
  cudaStream_t stream = compute_.get();
  HSRING_CUDA_TRY(cudaStreamWaitEvent(stream, b.assembled.get(), 0));  // our own event
  HSRING_CUDA_TRY(cudaEventRecord(b.compute_start.get(), stream));
  if (b.verify) {
    // Before the noise: the check is on exactly what the target produced.
    auto* verdict = b.verdict.as<gpu::VerifyVerdict>();
    HSRING_CUDA_TRY(gpu::launch_verify_assembled(b.hidden.data(), b.batch_id, layers_,
                                                 b.tokens_count, hidden_, elem_, verdict, stream));
    HSRING_CUDA_TRY(cudaMemcpyAsync(b.verdict_host.data(), verdict, sizeof(gpu::VerifyVerdict),
                                    cudaMemcpyDeviceToHost, stream));
  }
  HSRING_CUDA_TRY(cudaEventRecord(b.verified.get(), stream));
  if (b.noise) {
    const float std = float(options_.noise.std_at(b.step));
    HSRING_CUDA_TRY(gpu::launch_add_noise(b.hidden.data(),
                                          uint64_t(b.tokens_count) * layers_ * hidden_,
                                          ring_.shape().dtype, std, options_.seed, b.step, stream));
  }
  HSRING_CUDA_TRY(cudaEventRecord(b.done.get(), stream));
  return {};
}

bool GpuDrafterWorker::resolve(BatchBuffer& b) {
  if (!b.pending) return true;
  b.pending = false;
  if (cudaError_t err = cudaEventSynchronize(b.done.get()); err != cudaSuccess) {
    log_line(std::string("GPU work of a batch failed: ") + cudaGetErrorString(err));
    return false;
  }
  ProcessEntry& entry = session_.entry();
  if (b.verify) {
    record_stage(entry, Stage::kDrafterVerify,
                 ms_to_ns(gpu::elapsed_ms(b.compute_start.get(), b.verified.get())));
    const auto& verdict = *b.verdict_host.as<gpu::VerifyVerdict>();
    if (verdict.mismatches > 0) {
      const uint64_t row = uint64_t(layers_) * hidden_;
      const uint64_t first = verdict.first_bad;
      consumer_.mark_torn(
          b.batch_id,
          fmt::format("{} hidden-state element(s) differ; first at token {}, layer {}, dim {}",
                      verdict.mismatches, first / row, first % row / hidden_, first % hidden_));
    }
  }
  if (b.noise)
    record_stage(entry, Stage::kDrafterNoise,
                 ms_to_ns(gpu::elapsed_ms(b.verified.get(), b.done.get())));
  return true;
}

GpuDrafterWorker::StepResult GpuDrafterWorker::step(std::chrono::nanoseconds timeout) {
  ClaimedBatch claimed;
  if (consumer_.claim(timeout, claimed) != SlotStatus::kOk) return StepResult::kIdle;
  ProcessEntry& entry = session_.entry();

  const uint32_t index = next_buffer_;
  next_buffer_ ^= 1;
  BatchBuffer& b = *buffers_[index];
  if (!resolve(b)) return StepResult::kFailed;  // its earlier batch's GPU work is done

  // The header was published with the payload (acquire in the claim); the view checked its
  // counts against the shape before anything is copied by them.
  const SlotView& batch = claimed.view;
  const uint64_t batch_id = batch.batch_id();
  const uint32_t tokens = batch.token_count();
  std::string metadata_problem;
  if (!batch.in_bounds()) {
    metadata_problem = batch.bounds_problem();
  } else {
    if (gpu::CudaStatus s = enqueue_h2d(b, batch); !s.ok()) {
      log_line("H2D copy failed: " + s.message());
      return StepResult::kFailed;
    }
    // The host checks the metadata in the slot while the DMA runs. Model batches have no
    // reference bytes: their invariants are checked instead (the GPU check is off).
    if (model_batches_)
      metadata_problem = check_model_metadata(batch);
    else if (options_.verify)
      metadata_problem = verify_synthetic_metadata(ring_, batch.slot());
    // Our own event: once it completes, nothing more is read from the slot.
    if (cudaError_t err = cudaEventSynchronize(b.landed.get()); err != cudaSuccess) {
      log_line(std::string("H2D copy failed: ") + cudaGetErrorString(err));
      return StepResult::kFailed;
    }
  }
  if (consumer_.release(claimed).lost()) return StepResult::kLostSlot;
  // Counted as the header says, torn or not.
  const uint64_t step = consumer_.account(tokens);
  ++consumed_;
  if (!metadata_problem.empty()) {
    consumer_.mark_torn(batch_id, metadata_problem);
    return StepResult::kConsumed;
  }

  b.batch_id = batch_id;
  b.tokens_count = tokens;
  b.step = step;
  b.verify = options_.verify && !model_batches_;
  b.noise = options_.noise.enabled() && options_.noise.std_at(step) > 0;
  if (gpu::CudaStatus s = enqueue_compute(b); !s.ok()) {
    log_line("verify/noise failed: " + s.message());
    return StepResult::kFailed;
  }
  b.pending = true;
  last_buffer_ = index;
  // The DMA (and assembly) is complete by now: its timing can be read.
  if (cudaEventSynchronize(b.assembled.get()) == cudaSuccess)
    record_stage(entry, Stage::kDrafterH2D,
                 ms_to_ns(gpu::elapsed_ms(b.h2d_start.get(), b.assembled.get())));
  if (options_.step_ms > 0) {
    StageTimer timer(entry, Stage::kDrafterStep);
    std::this_thread::sleep_for(std::chrono::microseconds(int64_t(options_.step_ms * 1000)));
  }
  return StepResult::kConsumed;
}

bool GpuDrafterWorker::finish() {
  bool ok = true;
  for (auto& b : buffers_) ok = resolve(*b) && ok;
  return ok;
}

const void* GpuDrafterWorker::last_batch() const { return buffers_[last_buffer_]->hidden.data(); }
uint32_t GpuDrafterWorker::last_tokens() const { return buffers_[last_buffer_]->tokens_count; }
uint64_t GpuDrafterWorker::last_step() const { return buffers_[last_buffer_]->step; }
uint64_t GpuDrafterWorker::last_batch_id() const { return buffers_[last_buffer_]->batch_id; }

int GpuDrafterWorker::run() {
  if (session_.recovered_at_start().total() > 0) {
    log_line(fmt::format("returned {} slot(s) of the previous epoch",
                         session_.recovered_at_start().total()));
  }
  session_.set_state(ProcessState::kRunning);
  int code = kExitOk;
  while (keep_running()) {
    session_.heartbeat();
    const StepResult r = step(kClaimSlice);
    if (r == StepResult::kLostSlot) {
      code = kExitLostSlot;
      break;
    }
    if (r == StepResult::kFailed) {
      code = kExitInternal;
      break;
    }
  }
  if (!finish() && code == kExitOk) code = kExitInternal;
  session_.set_state(ProcessState::kDraining);
  return code;
}

}  // namespace hsring
