// The CUDA path of a C API producer (CUDA builds only): device-to-host copies of captured
// layers straight into the pinned slot, enqueued on the caller's stream, and a publisher
// thread that publishes each job once its own copy event has completed
// (docs/gpu-data-path.md: publish only complete data, never wait on another process's
// event). The caller's thread only enqueues and returns.
//
// Thread safety: enqueue_copy, submit and flush from the producer's thread; the
// publisher thread owns the queue's front. Guarded by mutex_ (see the members).
#pragma once

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hsring/hsring.h"
#include "shm/slot_claim.h"
#include "target_proc/batch_producer.h"

namespace hsring::gpu {
class HostRegistration;
}

namespace hsring::capi {

class CudaPublisher {
 public:
  // Pins the ring's payloads on the current device. Throws Error(kCuda).
  explicit CudaPublisher(BatchProducer& producer);
  // Publishes what was submitted, then joins the thread.
  ~CudaPublisher();

  // Enqueues a pitched copy of `rows` rows of `row_bytes` from `src` (device) into `dst`
  // (the pinned slot). Throws Error(kCuda).
  void enqueue_copy(std::byte* dst, uint64_t dst_pitch, const void* src, uint64_t src_pitch,
                    uint64_t row_bytes, uint32_t rows, void* stream);
  // Records the job's event on `stream` and hands the job to the publisher thread.
  hs_status submit(const SlotClaim& claim, const BatchPlan& plan, void* stream);
  // Waits until the queue is empty; the thread's first failure, or HS_OK.
  hs_status flush();

 private:
  struct Pending {
    SlotClaim claim;
    BatchPlan plan;
    cudaEvent_t copied = nullptr;
    uint64_t submitted_ns = 0;
  };
  void run();
  // A spare event, or a new one. Throws Error(kCuda).
  cudaEvent_t take_event();

  BatchProducer& producer_;
  std::unique_ptr<gpu::HostRegistration> pinned_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Pending> queue_;    // GUARDED_BY(mutex_); the front is being waited on
  bool closing_ = false;         // GUARDED_BY(mutex_)
  hs_status failure_ = HS_OK;    // GUARDED_BY(mutex_)
  std::string failure_message_;  // GUARDED_BY(mutex_)
  // Completed events, reused by later jobs (creating one costs microseconds of the
  // caller's critical path). GUARDED_BY(mutex_)
  std::vector<cudaEvent_t> spare_events_;
  std::thread thread_;
};

}  // namespace hsring::capi
