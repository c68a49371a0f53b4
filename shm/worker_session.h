// A worker's membership in a ring for its lifetime. Starting one takes the liveness lock
// of the worker's process index (waiting briefly for a dying predecessor to let go),
// opens a new epoch, and returns the slots of the previous epochs; destroying it after a
// clean exit marks the worker exited.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>

#include "shm/recovery.h"
#include "shm/ring.h"
#include "shm/slot_claim.h"

namespace hsring {

class WorkerSession {
 public:
  // Throws RingError (kProcessBusy) when another live process holds `index` after
  // `lock_wait`, or when `index` is not of `role` in this ring.
  static std::unique_ptr<WorkerSession> start(std::unique_ptr<Ring> ring, uint32_t index,
                                              Role role, std::chrono::milliseconds lock_wait);
  ~WorkerSession();

  Ring& ring() const { return *ring_; }
  Identity identity() const { return identity_; }
  ProcessEntry& entry() const { return ring_->process(identity_.index); }
  // What the start recovered from previous epochs.
  const RecoveryStats& recovered_at_start() const { return recovered_; }

  // Records the state; kRunning also tells systemd READY=1.
  void set_state(ProcessState state);
  // Marks progress: heartbeat time, systemd watchdog, and (once a second) recovery of
  // dead peers' slots.
  void heartbeat();

 private:
  WorkerSession(std::unique_ptr<Ring> ring, Identity identity);

  std::unique_ptr<Ring> ring_;
  Identity identity_;
  RecoveryStats recovered_;
  static constexpr uint64_t kPeerRecoveryPeriodNs = 1'000'000'000;
  // Atomic: heartbeat() may be called from a worker's loop and its helper threads.
  std::atomic<uint64_t> next_peer_recovery_ns_{0};
};

}  // namespace hsring
