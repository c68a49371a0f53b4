// The crash-safe half of a target, shared by its CPU and GPU pipelines: which batch of the
// shard comes next, binding a batch id to a slot (CLAIMED -> WRITING) before the shard
// position moves past it, adopting what a previous incarnation bound but never published,
// and publishing with accounting. A BatchPipeline decides how a batch's bytes get into
// its slot: at once on the host (CPU mode), or later, after a GPU copy (GPU mode).
//
// Why this order is crash-safe (docs/ring-protocol.md, "nothing twice"): a batch id is in
// exactly one of three places at any instant: before the shard position (not yet bound;
// a successor produces it fresh), bound in a WRITING slot (a successor adopts the slot and
// writes it again), or READY/consumed. Binding is the CAS that moves it from the first
// place to the second, and the shard position is stored after it.
//
// Thread safety: claim_and_bind() must be called by one thread at a time and in shard
// order (the GPU pipeline's copier thread, or the target thread in CPU mode), since it
// stores TargetProgress.next_seq. publish_batch() may run on another thread: it touches
// only the slot it owns and relaxed counters.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "shm/copy_ticket.h"
#include "shm/stage_timer.h"
#include "shm/worker_session.h"
#include "target_proc/hidden_state_source.h"
#include "worker/synthetic_batch.h"

namespace hsring {

// A batch to produce: fresh (bound when a slot is found), or adopted from a previous
// incarnation, its slot already WRITING under our epoch with this batch id.
struct BatchJob {
  BatchPlan plan;
  std::optional<SlotClaim> bound;
};

enum class PipelineStatus {
  kOk,        // done, or accepted for later
  kStopped,   // the run is stopping: the batch was not bound and is left to a successor
  kTimedOut,  // claim_and_bind's deadline passed with the ring full: nothing bound, try again
  kLostSlot,  // a slot we held was taken from us (we were presumed dead): exit
  kFailed,    // the GPU or the pipeline failed: exit; bound batches stay for a successor
};

// How a target turns a batch into a published slot.
class BatchPipeline {
 public:
  virtual ~BatchPipeline() = default;
  // Produces `job` into a slot and publishes it, before returning or later. Jobs are
  // bound and published in submission order.
  virtual PipelineStatus submit(BatchJob job) = 0;
  // Returns once every submitted job is published or dropped.
  virtual PipelineStatus flush() = 0;
  // The caller paused between two submissions on purpose (rate limit): a pipeline that
  // times the gap between forwards leaves this one out.
  virtual void note_pause() {}
};

class BatchProducer {
 public:
  // Batches are planned by `planner` (which must outlive the producer); without one,
  // synthetic plans of the ring's shape.
  explicit BatchProducer(WorkerSession& session);
  BatchProducer(WorkerSession& session, BatchPlanner& planner);

  WorkerSession& session() const { return session_; }
  Ring& ring() const { return ring_; }
  const BatchShard& shard() const { return shard_; }

  // Adopts the WRITING slots of our previous epochs and stores the shard position past
  // them. Returns their jobs, to submit before any new batch. Call once, at start.
  std::vector<BatchJob> adopt_unpublished();
  // The WRITING slots of our previous epochs that consumers gave back unread since the
  // last call (an early-published copy whose producer died: shm/copy_ticket.h), adopted
  // as adopt_unpublished does; empty, after one relaxed-cost load, when none were. Call
  // between submissions, on the thread that submits.
  std::vector<BatchJob> adopt_returned();
  // The shard position the next fresh batch takes (after adopt_unpublished()).
  uint64_t next_seq() const { return next_seq_; }
  // The plan of batch `batch_id` (what its slot header will say).
  BatchPlan plan(uint64_t batch_id) const { return planner_.plan(batch_id); }

  // True while the ring runs and nobody asked us to stop.
  bool keep_running() const;

  // Claims a free slot (waiting while the ring is full), binds `batch_id` to it, then
  // stores the shard position past it. The wait is timed into `wait_stage` if given.
  // kStopped when the run stops or `*cancel` turns true first, kTimedOut when the
  // monotonic `deadline_ns` (0: none) passes first (nothing bound then).
  PipelineStatus claim_and_bind(uint64_t batch_id, SlotClaim& claim,
                                std::optional<Stage> wait_stage = std::nullopt,
                                const std::atomic<bool>* cancel = nullptr,
                                uint64_t deadline_ns = 0);

  // Publishes a filled slot (WRITING -> READY) and counts the batch.
  // REQUIRES: the slot's payload and metadata are completely in host memory, or `early`
  // names the exported event recorded after the payload's copy (shm/copy_ticket.h; the
  // metadata must be in host memory); `ticket` then receives the ticket to settle.
  PipelineStatus publish_batch(SlotClaim& claim, const BatchPlan& plan,
                               const CopyEvent* early = nullptr, uint64_t* ticket = nullptr);

 private:
  // The jobs of slots adopted from our previous epochs, in shard order.
  std::vector<BatchJob> jobs_of(const std::vector<SlotClaim>& adopted) const;

  WorkerSession& session_;
  Ring& ring_;
  std::unique_ptr<SyntheticPlanner> own_planner_;  // when constructed without a planner
  BatchPlanner& planner_;
  BatchShard shard_;
  uint64_t next_seq_ = 0;
  uint32_t returned_seen_ = 0;  // TargetProgress.returned at our last adoption scan
};

}  // namespace hsring
