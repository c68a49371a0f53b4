#include "drafter_proc/gpu_drafter_worker.h"

#include <thread>

#include "common/clock.h"
#include "common/log.h"
#include "common/signals.h"
#include "drafter_proc/slot_dma.h"
#include "shm/consumer.h"
#include "shm/ledger.h"
#include "shm/stage_timer.h"
#include "worker/model_batch_check.h"
#include "worker/synthetic_batch.h"
#include "worker/worker_main.h"

namespace hsring {

namespace {
constexpr auto kClaimSlice = std::chrono::milliseconds(100);
constexpr uint64_t kTornLogLimit = 10;

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
      model_batches_(ring_.shape().content == PayloadContent::kModel) {}

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
  const Identity self = session.identity();
  w->rng_ = options.seed ^ (uint64_t(self.index) << 32) ^ self.epoch;
  HSRING_CUDA_CHECK(cudaDeviceSynchronize());
  return w;
}

bool GpuDrafterWorker::keep_running() const {
  return !stop_requested() && !launcher_gone() &&
         ring_.header().run_state.load(std::memory_order_acquire) == uint32_t(RunState::kRunning);
}

gpu::CudaStatus GpuDrafterWorker::enqueue_h2d(BatchBuffer& b, uint32_t slot, uint32_t tokens) {
  cudaStream_t stream = copy_.get();
  const uint64_t row_bytes = uint64_t(hidden_) * elem_;
  const uint64_t ints = uint64_t(tokens) * sizeof(int32_t);
  const bool staged = static_cast<bool>(b.staging.size());
  HSRING_CUDA_TRY(cudaEventRecord(b.h2d_start.get(), stream));
  if (staged && ring_.shape().split_layers) {
    for (uint32_t k = 0; k < layers_; ++k) {
      HSRING_CUDA_TRY(cudaMemcpyAsync(b.staging.data() + k * tokens * row_bytes,
                                      ring_.layer_region(slot, k), tokens * row_bytes,
                                      cudaMemcpyHostToDevice, stream));
    }
  } else if (gpu::CudaStatus s =
                 enqueue_slot_features(ring_, slot, tokens, b.hidden.data(), stream);
             !s.ok()) {
    return s;
  }
  HSRING_CUDA_TRY(
      cudaMemcpyAsync(b.tokens.data(), ring_.tokens(slot), ints, cudaMemcpyHostToDevice, stream));
  HSRING_CUDA_TRY(cudaMemcpyAsync(b.positions.data(), ring_.positions(slot), ints,
                                  cudaMemcpyHostToDevice, stream));
  HSRING_CUDA_TRY(cudaMemcpyAsync(b.doc_offsets.data(), ring_.doc_offsets(slot),
                                  ints + sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  HSRING_CUDA_TRY(
      cudaMemcpyAsync(b.labels.data(), ring_.labels(slot), ints, cudaMemcpyHostToDevice, stream));
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

void GpuDrafterWorker::count_torn(uint64_t batch_id, const std::string& problem) {
  ledger_mark_torn(ring_, batch_id);
  session_.entry().torn.fetch_add(1, std::memory_order_relaxed);
  ++torn_;
  if (torn_logged_++ < kTornLogLimit)
    log_line("TORN batch " + std::to_string(batch_id) + ": " + problem);
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
      count_torn(b.batch_id, std::to_string(verdict.mismatches) +
                                 " hidden-state element(s) differ; first at token " +
                                 std::to_string(first / row) + ", layer " +
                                 std::to_string(first % row / hidden_) + ", dim " +
                                 std::to_string(first % hidden_));
    }
  }
  if (b.noise)
    record_stage(entry, Stage::kDrafterNoise,
                 ms_to_ns(gpu::elapsed_ms(b.verified.get(), b.done.get())));
  return true;
}

GpuDrafterWorker::StepResult GpuDrafterWorker::step(std::chrono::nanoseconds timeout) {
  if (wait_start_ns_ == 0) wait_start_ns_ = monotonic_ns();
  auto claim =
      claim_ready_slot(ring_, session_.identity(), ring_.shape().hs_min_ready, timeout, rng_);
  if (!claim) return StepResult::kIdle;
  ProcessEntry& entry = session_.entry();
  record_stage(entry, Stage::kDrafterClaimWait, monotonic_ns() - wait_start_ns_);

  const uint32_t index = next_buffer_;
  next_buffer_ ^= 1;
  BatchBuffer& b = *buffers_[index];
  if (!resolve(b)) return StepResult::kFailed;  // its earlier batch's GPU work is done

  // The header was published with the payload (acquire in the claim); check before use.
  const SlotHeader& slot = ring_.slot(claim->index);
  const uint64_t batch_id = slot.batch_id.load(std::memory_order_relaxed);
  const uint32_t tokens = slot.token_count.load(std::memory_order_relaxed);
  std::string metadata_problem;
  if (tokens > ring_.shape().max_tokens) {
    metadata_problem = "token count " + std::to_string(tokens) + " exceeds the slot's " +
                       std::to_string(ring_.shape().max_tokens);
  } else {
    if (gpu::CudaStatus s = enqueue_h2d(b, claim->index, tokens); !s.ok()) {
      log_line("H2D copy failed: " + s.message());
      return StepResult::kFailed;
    }
    // The host checks the metadata in the slot while the DMA runs. Model batches have no
    // reference bytes: their invariants are checked instead (the GPU check is off).
    if (model_batches_)
      metadata_problem = check_model_metadata(ring_, claim->index);
    else if (options_.verify)
      metadata_problem = verify_synthetic_metadata(ring_, claim->index);
    // Our own event: once it completes, nothing more is read from the slot.
    if (cudaError_t err = cudaEventSynchronize(b.landed.get()); err != cudaSuccess) {
      log_line(std::string("H2D copy failed: ") + cudaGetErrorString(err));
      return StepResult::kFailed;
    }
  }
  if (!release_consumed(ring_, *claim)) {
    log_line("lost ownership of slot " + std::to_string(claim->index) + "; exiting");
    return StepResult::kLostSlot;
  }
  wait_start_ns_ = monotonic_ns();
  const uint64_t step = entry.batches.fetch_add(1, std::memory_order_relaxed);
  entry.tokens.fetch_add(tokens, std::memory_order_relaxed);
  entry.hs_bytes.fetch_add(uint64_t(tokens) * layers_ * hidden_ * elem_, std::memory_order_relaxed);
  ++consumed_;
  if (!metadata_problem.empty()) {
    count_torn(batch_id, metadata_problem);
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
    log_line("returned " + std::to_string(session_.recovered_at_start().total()) +
             " slot(s) of the previous epoch");
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
