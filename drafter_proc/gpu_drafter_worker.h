// The GPU drafter's loop: claim a random READY slot once enough are ready, copy it to the
// GPU straight into the [T, K*H] layout a drafter trains on, release the slot as soon as
// that copy has completed, then verify (verify mode) and add Gaussian noise on the GPU
// while the next slot is already being copied.
//
// Assembly: slot_dma.h's pitched copies by default; kStagedCopy instead copies the split
// layout's regions contiguously and places them with a device-to-device 2-D copy (kept as
// a fallback and for the benchmark).
//
// Verification happens before noise, on the noise-free assembled tensor: a kernel
// compares every element with synthetic_element_bits and counts mismatches; only that
// verdict (16 bytes) comes back to the host. The token metadata is checked on the host
// from the slot while the DMA runs. Noise follows in place: std from the schedule at the
// drafter's step, values from a counter-based generator keyed by (seed, step, element).
//
// Two batch buffers alternate, so verification and noise of one batch overlap the copy
// of the next; a buffer is reused only after its previous batch's GPU work completed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "gpu/copy_events.h"
#include "gpu/cuda_handles.h"
#include "gpu/kernels.h"
#include "gpu/noise_schedule.h"
#include "shm/worker_session.h"
#include "worker/batch_consumer.h"

namespace hsring {

struct GpuDrafterOptions {
  enum class Assembly { kPitchedCopy, kStagedCopy };
  int gpu = 0;
  gpu::NoiseSchedule noise;
  uint64_t seed = 0;  // of the random pull and of the noise
  bool verify = true;
  double step_ms = 0;  // simulated training time per batch
  Assembly assembly = Assembly::kPitchedCopy;
  // Benchmark probe: when set, the copy stream writes the GPU's global timer into
  // debug_h2d_start_stamps[batch_id % debug_stamp_count] before each batch's H2D.
  uint64_t* debug_h2d_start_stamps = nullptr;
  uint64_t debug_stamp_count = 0;
};

class GpuDrafterWorker {
 public:
  // Allocates the batch buffers on options.gpu, the calling thread's current device.
  // REQUIRES: the ring's payload is pinned in this process. Throws Error(kCuda).
  static std::unique_ptr<GpuDrafterWorker> create(WorkerSession& session,
                                                  const GpuDrafterOptions& options);
  ~GpuDrafterWorker();

  // Runs until a stop is requested or the ring drains. Returns the process exit code.
  int run();

  enum class StepResult { kConsumed, kIdle, kLostSlot, kFailed };
  // Consumes one slot, waiting up to `timeout` for one to be ready (kIdle if none).
  StepResult step(std::chrono::nanoseconds timeout);
  // Waits for the GPU work of every consumed batch and accounts its verdict. False when
  // the GPU failed.
  bool finish();

  uint64_t consumed() const { return consumed_; }
  uint64_t torn() const { return consumer_.torn(); }
  // Early-published batches whose copy was still running when claimed (shm/copy_ticket.h).
  uint64_t copies_awaited() const { return consumer_.copies_awaited(); }
  // The last consumed batch on the GPU, [tokens, K*H], after finish(): for tests.
  const void* last_batch() const;
  uint32_t last_tokens() const;
  uint64_t last_step() const;
  uint64_t last_batch_id() const;

 private:
  struct BatchBuffer;
  GpuDrafterWorker(WorkerSession& session, const GpuDrafterOptions& options);
  bool keep_running() const;
  // REQUIRES: batch.in_bounds().
  gpu::CudaStatus enqueue_h2d(BatchBuffer& b, const SlotView& batch);
  gpu::CudaStatus enqueue_compute(BatchBuffer& b);
  bool resolve(BatchBuffer& b);  // waits for b's GPU work, accounts its verdict

  WorkerSession& session_;
  Ring& ring_;
  const GpuDrafterOptions options_;
  const uint32_t layers_, hidden_, elem_;
  const bool model_batches_;          // a model ring: check invariants, not synthetic bytes
  gpu::CopyEventPoller copy_events_;  // early-published slots' events, polled before the H2D
  BatchConsumer consumer_;
  gpu::Stream copy_;
  gpu::Stream compute_;
  std::unique_ptr<BatchBuffer> buffers_[2];
  uint32_t next_buffer_ = 0;
  uint32_t last_buffer_ = 0;
  uint64_t consumed_ = 0;
};

}  // namespace hsring
