// A C API consumer: a drafter worker whose training step is the caller's. It keeps
// hsring-drafter's side of the protocol through the same BatchConsumer
// (worker/batch_consumer.h): wait for hs_min_ready READY slots, claim one at random
// (READY -> READING), let the caller read it, then mark it consumed and free it.
// Unreleased claims go back to READY at close; a crash leaves them to recovery, which
// returns them to READY too.
//
// Thread safety: one caller thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "capi/launcher_watch.h"
#include "hsring/hsring.h"
#include "shm/worker_session.h"
#include "worker/batch_consumer.h"

namespace hsring::gpu {
class HostRegistration;
}

namespace hsring::capi {

class Consumer {
 public:
  // Throws Error (kRing...: attach, busy index, epoch).
  static std::unique_ptr<Consumer> open(const std::string& ring, uint32_t index,
                                        const hs_consumer_options& options);
  ~Consumer();

  const Ring& ring() const { return session_->ring(); }
  uint32_t epoch() const { return session_->identity().epoch; }

  hs_status next(uint32_t timeout_ms, hs_batch& out);
  hs_status release(uint64_t ticket);
  void copy_to_device(uint64_t ticket, void* device, uint64_t device_bytes, void* stream,
                      float noise_std, uint64_t seed, uint64_t step);

 private:
  struct Held {
    ClaimedBatch batch;
    uint64_t claimed_ns = 0;
  };

  Consumer(std::unique_ptr<WorkerSession> session, const hs_consumer_options& options);
  bool keep_running();
  Held& held(uint64_t ticket);

  std::unique_ptr<WorkerSession> session_;
  Ring& ring_;
  LauncherWatch launcher_;
  BatchConsumer consumer_;
  std::vector<Held> held_;
#if HSRING_CAPI_CUDA
  std::unique_ptr<gpu::HostRegistration> pinned_;  // at the first device copy
#endif
};

}  // namespace hsring::capi
