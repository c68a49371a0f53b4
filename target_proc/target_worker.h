// The target's loop: produce the batches of its shard, in order, through a BatchPipeline.
// Crash safety lives in BatchProducer: the batch id is bound to the slot (CLAIMED ->
// WRITING) before the shard position moves past it, and a restarted target first writes
// again every batch its previous incarnations left bound in WRITING slots
// (docs/ring-protocol.md).
#pragma once

#include <cstdint>
#include <memory>

#include "shm/worker_session.h"
#include "target_proc/batch_producer.h"
#include "target_proc/hidden_state_source.h"

namespace hsring {

struct TargetOptions {
  double batches_per_second = 0;  // per target; 0 = as fast as possible
};

class TargetWorker {
 public:
  // CPU mode: `source` writes each batch straight into its slot.
  TargetWorker(WorkerSession& session, HiddenStateSource& source, TargetOptions options);
  // Any pipeline (GPU mode); `producer` must be the one `pipeline` binds and publishes with.
  TargetWorker(WorkerSession& session, BatchProducer& producer, BatchPipeline& pipeline,
               TargetOptions options);
  ~TargetWorker();
  // Runs until a stop is requested, the ring drains, or the shard is exhausted and
  // the ring stops. Returns the process exit code.
  int run();

 private:
  void pace();

  WorkerSession& session_;
  Ring& ring_;
  std::unique_ptr<BatchProducer> own_producer_;  // CPU mode
  std::unique_ptr<BatchPipeline> own_pipeline_;  // CPU mode
  BatchProducer& producer_;
  BatchPipeline& pipeline_;
  TargetOptions options_;
  uint64_t next_deadline_ns_ = 0;
};

}  // namespace hsring
