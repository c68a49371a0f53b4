// The target's loop: bind the next batch of its shard to a free slot, produce it, publish.
// Crash safety: the batch id is bound to the slot (CLAIMED -> WRITING) before the shard
// position moves past it, and a restarted target first writes again every batch its
// previous incarnations left bound in WRITING slots (docs/ring-protocol.md).
#pragma once

#include <cstdint>
#include <memory>

#include "shm/worker_session.h"
#include "target_proc/hidden_state_source.h"

namespace hsring {

struct TargetOptions {
  double batches_per_second = 0;  // per target; 0 = as fast as possible
};

class TargetWorker {
 public:
  TargetWorker(WorkerSession& session, HiddenStateSource& source, TargetOptions options);
  // Runs until a stop is requested, the ring drains, or the shard is exhausted and
  // the ring stops. Returns the process exit code.
  int run();

 private:
  // Produces and publishes a batch into a slot we hold in WRITING.
  bool produce_and_publish(SlotClaim& claim, uint64_t batch_id);
  bool keep_running() const;
  void pace();

  WorkerSession& session_;
  Ring& ring_;
  HiddenStateSource& source_;
  TargetOptions options_;
  BatchShard shard_;
  uint64_t next_deadline_ns_ = 0;
};

}  // namespace hsring
