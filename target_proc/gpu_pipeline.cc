#include "target_proc/gpu_pipeline.h"

#include <fmt/format.h>

#include "common/clock.h"
#include "common/log.h"
#include "gpu/kernels.h"
#include "shm/stage_timer.h"
#include "target_proc/gpu_model_source.h"

namespace hsring {

namespace {

uint64_t ms_to_ns(float ms) { return ms < 0 ? 0 : uint64_t(double(ms) * 1e6); }

}  // namespace

GpuTargetPipeline::GpuTargetPipeline(BatchProducer& producer, const GpuTargetOptions& options)
    : producer_(producer),
      ring_(producer.ring()),
      options_(options),
      layers_(ring_.shape().num_layers),
      hidden_(ring_.shape().hidden_size),
      elem_(dtype_size(ring_.shape().dtype)),
      capture_layer_bytes_(uint64_t(ring_.shape().max_tokens) * hidden_ * elem_),
      // Unsafe reuse (a test hook) must not be held back by the item count instead.
      max_in_flight_(options.debug_unsafe_early_reuse ? 2 * (options.postprocess_depth + 1)
                                                      : options.postprocess_depth + 1) {}

std::unique_ptr<GpuTargetPipeline> GpuTargetPipeline::create(BatchProducer& producer,
                                                             const GpuTargetOptions& options) {
  auto p = std::unique_ptr<GpuTargetPipeline>(new GpuTargetPipeline(producer, options));
  p->compute_ = gpu::make_stream();
  p->copy_ = gpu::make_stream();
  for (uint32_t b = 0; b < options.postprocess_depth + 1; ++b) {
    p->buffers_.push_back(gpu::DeviceBuffer::allocate(p->capture_layer_bytes_ * p->layers_));
    p->free_buffers_.push_back(b);
  }
  // A gap needs the previous forward's events while up to max_in_flight_ items are
  // pending: two more sets than that are never reused too early.
  for (uint32_t t = 0; t < p->max_in_flight_ + 2; ++t) {
    // The publisher sleeps on copy_start (early publish) and copy_end.
    p->timings_.push_back(Timing{gpu::make_event(), gpu::make_event(),
                                 gpu::make_event(cudaEventBlockingSync),
                                 gpu::make_event(cudaEventBlockingSync)});
  }
  if (options.gemm_flops_per_batch > 0) p->gemm_ = gpu::GemmLoad::create(p->compute_.get());
  if (options.early_publish)
    p->copy_events_ = std::make_unique<gpu::CopyEventPool>(p->ring_.slot_count());
  HSRING_CUDA_CHECK(cudaDeviceSynchronize());
  p->copier_ = std::thread([raw = p.get()] { raw->copier_loop(); });
  p->publisher_ = std::thread([raw = p.get()] { raw->publisher_loop(); });
  return p;
}

GpuTargetPipeline::~GpuTargetPipeline() {
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
  }
  cancel_.store(true, std::memory_order_release);
  changed_.notify_all();
  if (copier_.joinable()) copier_.join();
  {
    std::lock_guard lock(mutex_);
    copier_done_ = true;
  }
  changed_.notify_all();
  if (publisher_.joinable()) publisher_.join();
  // Nothing may still be reading a capture buffer or writing a pinned slot when the
  // buffers are freed and the ring unpinned.
  (void)cudaStreamSynchronize(copy_.get());
  (void)cudaStreamSynchronize(compute_.get());
}

void GpuTargetPipeline::fail(PipelineStatus status, const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    if (failure_ == PipelineStatus::kOk) failure_ = status;
  }
  if (!why.empty()) log_line("GPU pipeline: " + why);
  changed_.notify_all();
}

void GpuTargetPipeline::return_buffer(Item& item) {
  if (item.buffer_returned) return;
  item.buffer_returned = true;
  free_buffers_.push_back(item.buffer);
}

void GpuTargetPipeline::finish(Item& item) {
  {
    std::lock_guard lock(mutex_);
    return_buffer(item);
    --in_flight_;
  }
  changed_.notify_all();
}

gpu::CudaStatus GpuTargetPipeline::enqueue_forward(const BatchPlan& plan, uint32_t buffer,
                                                   const Timing& timing) {
  cudaStream_t stream = compute_.get();
  HSRING_CUDA_TRY(cudaEventRecord(timing.forward_start.get(), stream));
  if (options_.model != nullptr) {
    options_.model->enqueue(plan, buffer, buffers_[buffer].data(), capture_layer_bytes_, stream);
  } else if (ring_.shape().split_layers) {
    // K captured [T, H] layers, one region each.
    HSRING_CUDA_TRY(gpu::launch_synthetic_layers(buffers_[buffer].data(), capture_layer_bytes_,
                                                 plan.batch_id, layers_, plan.token_count, hidden_,
                                                 elem_, stream));
  } else {
    // Concatenated: each layer is captured straight into its columns of [T, K*H] (a
    // model's capture hook writes a strided view), so the D2H is one contiguous DMA.
    HSRING_CUDA_TRY(gpu::launch_synthetic_layers(buffers_[buffer].data(), uint64_t(hidden_) * elem_,
                                                 plan.batch_id, layers_, plan.token_count, hidden_,
                                                 elem_, stream, uint64_t(layers_) * hidden_));
  }
  if (gemm_) {
    if (gpu::CudaStatus s = gemm_->run(options_.gemm_flops_per_batch); !s.ok()) return s;
  }
  HSRING_CUDA_TRY(cudaEventRecord(timing.forward_end.get(), stream));
  return {};
}

PipelineStatus GpuTargetPipeline::submit(BatchJob job) {
  uint32_t buffer = 0;
  {
    std::unique_lock lock(mutex_);
    // Backpressure: wait for a capture buffer whose copy has completed.
    changed_.wait(lock, [&] {
      return failure_ != PipelineStatus::kOk ||
             (!free_buffers_.empty() && in_flight_ < max_in_flight_);
    });
    if (failure_ != PipelineStatus::kOk) return failure_;
    buffer = free_buffers_.front();
    free_buffers_.pop_front();
    ++in_flight_;
  }
  Item item;
  item.buffer = buffer;
  item.timing = uint32_t(forwards_ % timings_.size());
  item.previous_timing = previous_timing_;
  ++forwards_;
  previous_timing_ = int32_t(item.timing);
  std::string forward_error;
  try {
    if (gpu::CudaStatus s = enqueue_forward(job.plan, buffer, timings_[item.timing]); !s.ok())
      forward_error = s.message();
  } catch (const std::exception& e) {  // the model's CUDA, data or input errors
    forward_error = e.what();
  }
  if (!forward_error.empty()) {
    fail(PipelineStatus::kFailed, "forward failed: " + forward_error);
    finish(item);
    return PipelineStatus::kFailed;
  }
  item.job = std::move(job);
  {
    std::lock_guard lock(mutex_);
    copy_queue_.push_back(std::move(item));
  }
  changed_.notify_all();
  return PipelineStatus::kOk;
}

PipelineStatus GpuTargetPipeline::flush() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return in_flight_ == 0 || failure_ != PipelineStatus::kOk; });
  previous_timing_ = -1;  // an idle target's next gap is not the pipeline's
  return failure_;
}

gpu::CudaStatus GpuTargetPipeline::enqueue_copy(const Item& item) {
  cudaStream_t stream = copy_.get();
  const Timing& timing = timings_[item.timing];
  const uint32_t tokens = item.job.plan.token_count;
  const std::byte* capture = buffers_[item.buffer].data();
  // Our own event, in our own process: the copy starts when the forward has ended.
  HSRING_CUDA_TRY(cudaStreamWaitEvent(stream, timing.forward_end.get(), 0));
  HSRING_CUDA_TRY(cudaEventRecord(timing.copy_start.get(), stream));
  // A slow copy, as the tests need it: inside copy_start .. copy_end.
  if (options_.debug_copy_delay_us > 0)
    HSRING_CUDA_TRY(gpu::launch_gpu_sleep(options_.debug_copy_delay_us, stream));
  const uint64_t row_bytes = uint64_t(hidden_) * elem_;
  if (ring_.shape().split_layers) {
    // Split layout: layer k's [T, H] region, one contiguous DMA each.
    for (uint32_t k = 0; k < layers_; ++k) {
      HSRING_CUDA_TRY(cudaMemcpyAsync(ring_.layer_region(item.claim.index, k),
                                      capture + k * capture_layer_bytes_, tokens * row_bytes,
                                      cudaMemcpyDeviceToHost, stream));
    }
  } else {
    // Concatenated: the capture buffer is already [T, K*H]. (A pitched 2-D DMA per layer
    // from [T, H] captures ran at 80% of PCIe on an H200: bench/RESULTS.md.)
    HSRING_CUDA_TRY(cudaMemcpyAsync(ring_.payload(item.claim.index), capture,
                                    uint64_t(tokens) * layers_ * row_bytes, cudaMemcpyDeviceToHost,
                                    stream));
  }
  if (options_.model != nullptr) {
    HSRING_CUDA_TRY(cudaMemcpyAsync(ring_.labels(item.claim.index),
                                    options_.model->labels(item.buffer), sizeof(int32_t) * tokens,
                                    cudaMemcpyDeviceToHost, stream));
  }
  if (options_.debug_copy_end_stamps != nullptr) {
    HSRING_CUDA_TRY(gpu::launch_timestamp(
        options_.debug_copy_end_stamps + item.job.plan.batch_id % options_.debug_stamp_count,
        stream));
  }
  HSRING_CUDA_TRY(cudaEventRecord(timing.copy_end.get(), stream));
  return {};
}

bool GpuTargetPipeline::publishes_early(const Item& item) const {
  if (!copy_events_ || options_.debug_unsafe_early_reuse) return false;
  return options_.model == nullptr || !options_.model->masks_labels(item.buffer);
}

void GpuTargetPipeline::copier_loop() {
  if (cudaSetDevice(options_.gpu) != cudaSuccess) {
    fail(PipelineStatus::kFailed, fmt::format("cannot use GPU {} in the copier", options_.gpu));
  }
  while (true) {
    Item item;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return !copy_queue_.empty() || closing_; });
      if (copy_queue_.empty()) break;
      item = std::move(copy_queue_.front());
      copy_queue_.pop_front();
      if (failure_ != PipelineStatus::kOk && !item.job.bound) {
        lock.unlock();
        finish(item);  // never bound: the shard position still covers it
        continue;
      }
    }
    if (item.job.bound) {
      item.claim = *item.job.bound;
    } else {
      const PipelineStatus s =
          producer_.claim_and_bind(item.job.plan.batch_id, item.claim, std::nullopt, &cancel_);
      if (s != PipelineStatus::kOk) {
        if (s != PipelineStatus::kStopped) fail(s, "");
        finish(item);
        continue;
      }
    }
    if (gpu::CudaStatus s = enqueue_copy(item); !s.ok()) {
      // The slot stays WRITING with its batch bound: our successor adopts and rewrites it.
      fail(PipelineStatus::kFailed, "copy failed: " + s.message());
      finish(item);
      continue;
    }
    // The token metadata comes from the host (the batch's inputs): write it into the slot
    // while the DMA runs. SYNC POINT WRITE: the queue's mutex orders these stores before
    // the publisher's release CAS to READY, which consumers acquire.
    if (options_.model != nullptr)
      options_.model->write_metadata(item.buffer, ring_, item.claim.index);
    else
      fill_synthetic_metadata(ring_, item.claim.index, item.job.plan);
    item.copy_enqueued_ns = monotonic_ns();
    if (publishes_early(item)) {
      // Consumers poll this event, recorded after the copies, before they read the layers.
      if (gpu::CudaStatus s = copy_events_->record(item.claim.index, copy_.get(), item.event);
          !s.ok()) {
        fail(PipelineStatus::kFailed, "copy event failed: " + s.message());
        finish(item);
        continue;
      }
      item.early = true;
    }
    {
      std::lock_guard lock(mutex_);
      if (options_.debug_unsafe_early_reuse) return_buffer(item);  // the bug, on purpose
      publish_queue_.push_back(std::move(item));
    }
    changed_.notify_all();
  }
}

void GpuTargetPipeline::record_timings(const Item& item) {
  ProcessEntry& entry = producer_.session().entry();
  const Timing& t = timings_[item.timing];
  record_stage(entry, Stage::kTargetForward,
               ms_to_ns(gpu::elapsed_ms(t.forward_start.get(), t.forward_end.get())));
  record_stage(entry, Stage::kTargetCopy,
               ms_to_ns(gpu::elapsed_ms(t.copy_start.get(), t.copy_end.get())));
  if (item.previous_timing >= 0) {
    const Timing& previous = timings_[uint32_t(item.previous_timing)];
    const float gap = gpu::elapsed_ms(previous.forward_end.get(), t.forward_start.get());
    if (gap >= 0) record_stage(entry, Stage::kTargetEnqueue, ms_to_ns(gap));
  }
}

bool GpuTargetPipeline::publish_early(Item& item) {
  // Published once the D2H has started, not at its enqueue: a drafter then holds the slot
  // (polling its event) for the copy's time at most, never for the forward the copy waits
  // for. This wake-up happens while the DMA runs, off the hand-off's path.
  if (const cudaError_t err = cudaEventSynchronize(timings_[item.timing].copy_start.get());
      err != cudaSuccess) {
    fail(PipelineStatus::kFailed, std::string("copy did not start: ") + cudaGetErrorString(err));
    finish(item);  // not published: the slot stays WRITING for our successor
    return false;
  }
  const PipelineStatus s =
      producer_.publish_batch(item.claim, item.job.plan, &item.event, &item.ticket);
  record_stage(producer_.session().entry(), Stage::kTargetPublishWait,
               monotonic_ns() - item.copy_enqueued_ns);
  if (s != PipelineStatus::kOk) {
    fail(s, "");
    finish(item);
    return false;
  }
  return true;
}

void GpuTargetPipeline::publisher_loop() {
  (void)cudaSetDevice(options_.gpu);
  while (true) {
    Item item;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return !publish_queue_.empty() || copier_done_; });
      if (publish_queue_.empty()) break;
      item = std::move(publish_queue_.front());
      publish_queue_.pop_front();
    }
    if (item.early && !publish_early(item)) continue;
    // Invariant 2: the slot becomes READY only after our own copy event has completed.
    const cudaError_t err = cudaEventSynchronize(timings_[item.timing].copy_end.get());
    if (err != cudaSuccess) {
      fail(PipelineStatus::kFailed,
           std::string("copy did not complete: ") + cudaGetErrorString(err));
      // Not published: the slot stays WRITING for our successor; published early, its
      // consumer finds us dead with the ticket pending and gives it back (copy_ticket.h).
      finish(item);
      continue;
    }
    if (item.early) {
      // Consumers that did not see the event complete read once the ticket is settled.
      (void)settle_copy(ring_, item.claim.index, item.ticket);
      record_timings(item);
      finish(item);
      continue;
    }
    // The D2H overwrote the slot's labels with the greedy tokens: the loss mask goes on top,
    // here, before READY (SYNC POINT WRITE: the release CAS of publish_batch). Not when the
    // debug mode already handed the buffer back: its batch may be being replaced.
    if (options_.model != nullptr && !item.buffer_returned)
      options_.model->mask_labels(item.buffer, ring_, item.claim.index);
    record_timings(item);
    const PipelineStatus s = producer_.publish_batch(item.claim, item.job.plan);
    record_stage(producer_.session().entry(), Stage::kTargetPublishWait,
                 monotonic_ns() - item.copy_enqueued_ns);
    if (s != PipelineStatus::kOk) fail(s, "");
    finish(item);
  }
}

}  // namespace hsring
