#include "capi/cuda_publisher.h"

#include <fmt/format.h>

#include "capi/capi_error.h"
#include "common/clock.h"
#include "common/log.h"
#include "gpu/cuda_check.h"
#include "gpu/host_registration.h"
#include "shm/stage_timer.h"

namespace hsring::capi {

namespace {

void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw gpu::cuda_error(e, std::string(call) + ": " + cudaGetErrorString(e));
}

}  // namespace

CudaPublisher::CudaPublisher(BatchProducer& producer) : producer_(producer) {
  pinned_ = gpu::pin_ring_payload(producer.ring());  // Error(kCuda): HS_ERR_CUDA
  thread_ = std::thread([this] { run(); });
}

CudaPublisher::~CudaPublisher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
  }
  changed_.notify_all();
  thread_.join();
  // The thread drained the queue: no copy into the pinned payload is in flight, so the
  // registration may go, and no pooled event is recorded on any stream.
  for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
}

void CudaPublisher::enqueue_copy(std::byte* dst, uint64_t dst_pitch, const void* src,
                                 uint64_t src_pitch, uint64_t row_bytes, uint32_t rows,
                                 void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  // Both sides dense (split layers from a contiguous tensor): one linear copy, the
  // cheaper launch; the 2-D copy otherwise (a [T, K*H] slot, a strided source).
  if (dst_pitch == row_bytes && src_pitch == row_bytes) {
    check(cudaMemcpyAsync(dst, src, row_bytes * rows, cudaMemcpyDeviceToHost, s),
          "cudaMemcpyAsync");
    return;
  }
  check(
      cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDeviceToHost, s),
      "cudaMemcpy2DAsync");
}

cudaEvent_t CudaPublisher::take_event() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!spare_events_.empty()) {
      cudaEvent_t e = spare_events_.back();
      spare_events_.pop_back();
      return e;
    }
  }
  // Blocking sync: the publisher thread sleeps in cudaEventSynchronize instead of spinning.
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync),
        "cudaEventCreateWithFlags");
  return e;
}

hs_status CudaPublisher::submit(const SlotClaim& claim, const BatchPlan& plan, void* stream) {
  // A pooled event (one per job in flight, at most the ring's slots): no create or
  // destroy on the caller's critical path after the first jobs.
  Pending p{claim, plan, take_event(), monotonic_ns()};
  const cudaError_t recorded = cudaEventRecord(p.copied, static_cast<cudaStream_t>(stream));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (recorded != cudaSuccess || failure_ != HS_OK) {
      // Never recorded, or recorded and never waited on: re-recording it later is fine.
      spare_events_.push_back(p.copied);
      if (recorded != cudaSuccess)
        return fail(HS_ERR_CUDA, std::string("cudaEventRecord: ") + cudaGetErrorString(recorded));
      return fail(failure_, failure_message_);
    }
    queue_.push_back(p);
  }
  changed_.notify_all();
  return HS_OK;
}

hs_status CudaPublisher::flush() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return queue_.empty(); });
  return failure_ == HS_OK ? HS_OK : fail(failure_, failure_message_);
}

void CudaPublisher::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return closing_ || !queue_.empty(); });
    if (queue_.empty()) return;  // closing, nothing left
    Pending p = queue_.front();  // stays queued (flush waits) until published
    lock.unlock();
    // SYNC POINT: our own copy event, on our own thread (docs/ring-protocol.md invariant 6:
    // never a peer's event). Only after it has completed is the payload in host memory, and
    // only then may the release CAS in publish make the slot READY (invariant 2).
    const cudaError_t e = cudaEventSynchronize(p.copied);
    ProcessEntry& entry = producer_.session().entry();
    hs_status status = HS_OK;
    std::string message;
    if (e != cudaSuccess) {
      // Never published: the slot stays WRITING with its batch id, for a successor.
      status = HS_ERR_CUDA;
      message = fmt::format("copy of batch {} failed: {}", p.plan.batch_id, cudaGetErrorString(e));
    } else {
      record_stage(entry, Stage::kTargetCopy, monotonic_ns() - p.submitted_ns);
      StageTimer timer(entry, Stage::kTargetPublishWait);
      if (producer_.publish_batch(p.claim, p.plan) != PipelineStatus::kOk) {
        status = HS_ERR_LOST_SLOT;
        message = fmt::format("lost ownership of slot {} before publishing batch {}", p.claim.index,
                              p.plan.batch_id);
      }
    }
    lock.lock();
    queue_.pop_front();
    // Completed: free to be recorded again. After a failed copy the event's error state
    // is the context's (sticky), so destroy it rather than pool it.
    if (e == cudaSuccess) {
      spare_events_.push_back(p.copied);
    } else {
      cudaEventDestroy(p.copied);
    }
    if (status != HS_OK && failure_ == HS_OK) {
      failure_ = status;
      failure_message_ = message;
      log_line("error: " + message);
    }
    changed_.notify_all();
  }
}

}  // namespace hsring::capi
