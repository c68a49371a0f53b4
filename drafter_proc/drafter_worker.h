// The drafter's loop in verify mode: claim a random READY slot once enough are ready,
// check every payload element and metadata field against the synthetic function, count
// torn batches, release. This is the synthetic ring's drafter; on a ring of model batches
// the drafter trains instead (training_drafter.h).
#pragma once

#include <cstdint>

#include "shm/worker_session.h"
#include "worker/batch_consumer.h"

namespace hsring {

// True while the ring runs and neither a stop was requested nor the launcher is gone:
// whether a drafter (verifying or training) claims another batch.
bool drafter_keeps_running(const Ring& ring);

struct DrafterOptions {
  double step_ms = 0;  // simulated work per batch after verification
  uint64_t seed = 0;   // for the random pull
};

class DrafterWorker {
 public:
  DrafterWorker(WorkerSession& session, DrafterOptions options);
  // Runs until a stop is requested or the ring drains. Returns the process exit code.
  int run();

 private:
  bool keep_running() const;
  // Checks the batch (marking it torn) and simulates the step.
  void verify(BatchConsumer& consumer, const ClaimedBatch& batch);

  WorkerSession& session_;
  Ring& ring_;
  DrafterOptions options_;
};

}  // namespace hsring
