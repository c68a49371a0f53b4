// The GPU target's pipeline. The target thread runs the forward on a compute stream (the
// synthetic source as a kernel, plus optional cuBLAS GEMM load standing in for a model)
// into one of postprocess_depth + 1 capture buffers, records an event, hands the batch to
// the postprocess stage and returns to start the next forward at once. The postprocess
// stage is two threads:
//   copier:    claims and binds a slot (in shard order), makes the copy stream wait on the
//              forward's event, enqueues the D2H copies of the K layers straight into the
//              pinned slot (K contiguous DMAs in the split layout; in the concatenated one
//              the forward captured into [T, K*H] already, so one DMA) and, for a model,
//              of its greedy labels, records a copy event, and writes the token metadata
//              into the slot from the host meanwhile;
//   publisher: waits for that copy event (our own event: invariant 6 forbids waiting only
//              on other processes' events), then publishes the slot (invariant 2) and
//              returns the capture buffer.
// With early_publish the copier also records the slot's exported CUDA IPC event after the
// copies, and the publisher publishes as soon as the copy has started (shm/copy_ticket.h),
// then settles the slot's copy ticket where it would have published.
// A capture buffer goes back to the target thread only after its copy has completed, so
// a forward never overwrites hidden states still being copied (docs/gpu-data-path.md,
// capture-buffer lifetime). The target thread blocks only when every buffer is still being copied.
//
// Stage counters (docs/gpu-data-path.md): target.forward and target.copy are GPU times
// from events; target.enqueue is the target's critical path per batch, the compute
// stream's idle time from one forward's end to the next forward's start; target.publish_wait
// is the host time from the copy's enqueue to the slot's publication.
//
// Thread safety: submit(), flush() and note_pause() belong to the target thread. Items move
// target -> copier -> publisher through queues guarded by mutex_; each capture buffer and
// each timing set is owned by exactly one item at a time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "gpu/copy_events.h"
#include "gpu/cuda_handles.h"
#include "gpu/gemm_load.h"
#include "target_proc/batch_producer.h"
#include "target_proc/token_source.h"

namespace hsring {

struct GpuTargetOptions {
  int gpu = 0;
  uint32_t postprocess_depth = 1;   // batches in postprocess at once; capture buffers = depth + 1
  double gemm_flops_per_batch = 0;  // GEMM work per forward, standing in for a model
  // The target model and its tokens (a ring of model batches); nullptr: synthetic batches.
  // Must have postprocess_depth + 1 capture buffers and outlive the pipeline.
  class GpuModelSource* model = nullptr;
  // For run_gpu_target to open the model with: the target's spec ("" : synthetic), the
  // seed of a preset's random weights and where the tokens come from.
  std::string model_spec;
  uint64_t model_seed = 0;
  TokenSourceOptions data;
  // Early publish (shm/copy_ticket.h): a slot is published as soon as its D2H has started,
  // with an exported CUDA IPC event recorded after it, and its ticket settled once the copy
  // completed; consumers poll the event (invariant 6). A batch
  // whose labels need the host's loss mask after the copy is published after it, as
  // without this option.
  bool early_publish = false;
  // Test hooks. Delays every copy on the GPU (a sleep kernel on the copy stream) ...
  uint32_t debug_copy_delay_us = 0;
  // ... and, for the test that proves the capture-buffer guard matters, hands a capture
  // buffer back as soon as its copy is enqueued instead of completed (the NaN bug of the
  // old pipeline). Never set outside tests.
  bool debug_unsafe_early_reuse = false;
  // Benchmark probe: when set, the copy stream writes the GPU's global timer into
  // debug_copy_end_stamps[batch_id % debug_stamp_count] after each batch's D2H (pinned,
  // mapped host memory; transport_bench's hand-off latency).
  uint64_t* debug_copy_end_stamps = nullptr;
  uint64_t debug_stamp_count = 0;
};

class GpuTargetPipeline final : public BatchPipeline {
 public:
  // Allocates the capture buffers and streams on options.gpu (which must be the calling
  // thread's current device) and starts the postprocess threads. Throws Error(kCuda).
  // REQUIRES: the ring's payload is pinned in this process (gpu::pin_ring_payload).
  static std::unique_ptr<GpuTargetPipeline> create(BatchProducer& producer,
                                                   const GpuTargetOptions& options);
  ~GpuTargetPipeline() override;  // finishes bound batches, drops unbound ones, joins

  PipelineStatus submit(BatchJob job) override;
  PipelineStatus flush() override;
  void note_pause() override { previous_timing_ = -1; }

 private:
  struct Timing {  // the events of one forward and its copy
    gpu::Event forward_start, forward_end, copy_start, copy_end;
  };
  struct Item {
    BatchJob job;
    SlotClaim claim;
    uint32_t buffer = 0;
    uint32_t timing = 0;
    int32_t previous_timing = -1;  // the forward before this one, for the gap
    uint64_t copy_enqueued_ns = 0;
    bool buffer_returned = false;
    bool early = false;   // published once its copy starts, with `event` (early publish)
    CopyEvent event;      // early: the slot's exported event, recorded after the copies
    uint64_t ticket = 0;  // early: the copy ticket to settle once the copy has completed
  };

  GpuTargetPipeline(BatchProducer& producer, const GpuTargetOptions& options);
  gpu::CudaStatus enqueue_forward(const BatchPlan& plan, uint32_t buffer, const Timing& timing);
  gpu::CudaStatus enqueue_copy(const Item& item);
  bool publishes_early(const Item& item) const;
  bool publish_early(Item& item);  // false when it failed (the item is finished)
  void copier_loop();
  void publisher_loop();
  void record_timings(const Item& item);
  void fail(PipelineStatus status, const std::string& why);
  void return_buffer(Item& item);  // REQUIRES: mutex_ held
  void finish(Item& item);         // the item leaves the pipeline (published or dropped)

  BatchProducer& producer_;
  Ring& ring_;
  const GpuTargetOptions options_;
  const uint32_t layers_, hidden_, elem_;
  const uint64_t capture_layer_bytes_;  // one captured [max_tokens, H] layer
  const uint32_t max_in_flight_;

  gpu::Stream compute_;
  gpu::Stream copy_;
  std::vector<gpu::DeviceBuffer> buffers_;
  std::vector<Timing> timings_;
  std::unique_ptr<gpu::GemmLoad> gemm_;
  std::unique_ptr<gpu::CopyEventPool> copy_events_;  // early publish only
  uint64_t forwards_ = 0;                            // target thread only
  int32_t previous_timing_ = -1;                     // target thread only

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<uint32_t> free_buffers_;             // GUARDED_BY(mutex_)
  std::deque<Item> copy_queue_;                   // GUARDED_BY(mutex_)
  std::deque<Item> publish_queue_;                // GUARDED_BY(mutex_)
  uint32_t in_flight_ = 0;                        // GUARDED_BY(mutex_): submitted, not yet finished
  bool closing_ = false;                          // GUARDED_BY(mutex_)
  bool copier_done_ = false;                      // GUARDED_BY(mutex_)
  PipelineStatus failure_ = PipelineStatus::kOk;  // GUARDED_BY(mutex_)
  std::atomic<bool> cancel_{false};               // stops a copier waiting for a free slot

  std::thread copier_;
  std::thread publisher_;
};

}  // namespace hsring
