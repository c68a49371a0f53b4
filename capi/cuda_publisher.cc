#include "capi/cuda_publisher.h"

#include "capi/capi_error.h"
#include "common/clock.h"
#include "common/log.h"
#include "gpu/host_registration.h"
#include "shm/stage_timer.h"

namespace hsring::capi {

namespace {

void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess)
    throw ApiError(HS_ERR_CUDA, std::string(call) + ": " + cudaGetErrorString(e));
}

}  // namespace

CudaPublisher::CudaPublisher(BatchProducer& producer) : producer_(producer) {
  try {
    pinned_ = gpu::pin_ring_payload(producer.ring());
  } catch (const std::exception& e) {
    throw ApiError(HS_ERR_CUDA, e.what());
  }
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
  // registration may go.
}

void CudaPublisher::enqueue_copy(std::byte* dst, uint64_t dst_pitch, const void* src,
                                 uint64_t src_pitch, uint64_t row_bytes, uint32_t rows,
                                 void* stream) {
  check(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDeviceToHost,
                          static_cast<cudaStream_t>(stream)),
        "cudaMemcpy2DAsync");
}

hs_status CudaPublisher::submit(const SlotClaim& claim, const BatchPlan& plan, void* stream) {
  Pending p{claim, plan, nullptr, monotonic_ns()};
  // Blocking sync: the publisher thread sleeps in cudaEventSynchronize instead of spinning.
  check(cudaEventCreateWithFlags(&p.copied, cudaEventDisableTiming | cudaEventBlockingSync),
        "cudaEventCreateWithFlags");
  if (cudaError_t e = cudaEventRecord(p.copied, static_cast<cudaStream_t>(stream));
      e != cudaSuccess) {
    cudaEventDestroy(p.copied);
    check(e, "cudaEventRecord");
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_ != HS_OK) {
      cudaEventDestroy(p.copied);
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
    // SYNC POINT: our own copy event, on our own thread (DESIGN.md invariant 6: never a
    // peer's event). Only after it has completed is the payload in host memory, and only
    // then may the release CAS in publish make the slot READY (invariant 2).
    const cudaError_t e = cudaEventSynchronize(p.copied);
    cudaEventDestroy(p.copied);
    ProcessEntry& entry = producer_.session().entry();
    hs_status status = HS_OK;
    std::string message;
    if (e != cudaSuccess) {
      // Never published: the slot stays WRITING with its batch id, for a successor.
      status = HS_ERR_CUDA;
      message = std::string("copy of batch ") + std::to_string(p.plan.batch_id) +
                " failed: " + cudaGetErrorString(e);
    } else {
      record_stage(entry, Stage::kTargetCopy, monotonic_ns() - p.submitted_ns);
      StageTimer timer(entry, Stage::kTargetPublishWait);
      if (producer_.publish_batch(p.claim, p.plan) != PipelineStatus::kOk) {
        status = HS_ERR_LOST_SLOT;
        message = "lost ownership of slot " + std::to_string(p.claim.index) +
                  " before publishing batch " + std::to_string(p.plan.batch_id);
      }
    }
    lock.lock();
    queue_.pop_front();
    if (status != HS_OK && failure_ == HS_OK) {
      failure_ = status;
      failure_message_ = message;
      log_line("error: " + message);
    }
    changed_.notify_all();
  }
}

}  // namespace hsring::capi
