// A worker's membership in a ring for its lifetime. Starting one takes the liveness lock
// of the worker's process index (waiting briefly for a dying predecessor to let go),
// opens a new epoch, and returns the slots of the previous epochs; destroying it after a
// clean exit marks the worker exited.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shm/recovery.h"
#include "shm/ring.h"
#include "shm/slot_claim.h"

namespace hsring {

class WorkerSession {
 public:
  // Throws Error (kProcessBusy) when another live process holds `index` after
  // `lock_wait`, or when `index` is not of `role` in this ring.
  static std::unique_ptr<WorkerSession> start(std::unique_ptr<Ring> ring, uint32_t index, Role role,
                                              std::chrono::milliseconds lock_wait);
  ~WorkerSession();

  Ring& ring() const { return *ring_; }
  Identity identity() const { return identity_; }
  ProcessEntry& entry() const { return ring_->process(identity_.index); }
  // What the start recovered from previous epochs.
  const RecoveryStats& recovered_at_start() const { return recovered_; }

  // Records the state; kRunning also stamps a heartbeat (the setup before it is not a
  // hang) and runs the on_running duties.
  void set_state(ProcessState state);
  // Marks progress: heartbeat time, (once a second) recovery of dead peers' slots and the
  // check that the ring is intact, then the on_heartbeat duties.
  void heartbeat();

  // Duties of the floor above (worker/session_duties.h: systemd notifications, the profile
  // log), so the ring's layer knows neither. An on_heartbeat duty gets monotonic_ns() and
  // may run on any thread that heartbeats, several at once: it must be thread-safe.
  // REQUIRES: no other thread calls heartbeat() or set_state() yet (the loops have not
  // started).
  void on_heartbeat(std::function<void(uint64_t now_ns)> duty);
  void on_running(std::function<void()> duty);

  // `handler` is called once, from heartbeat(), when Ring::check_intact() finds that the
  // live header no longer equals what was validated at attach, or the segment shrank:
  // another process wrote into it. The worker goes on with its own validated copy (no
  // pointer it computes leaves the mapping) and should stop.
  // REQUIRES: no other thread calls heartbeat() yet (the loops have not started).
  void on_ring_damage(std::function<void(const std::string&)> handler);
  // True once heartbeat() found the ring damaged.
  bool ring_damaged() const { return ring_damaged_.load(std::memory_order_relaxed); }

 private:
  WorkerSession(std::unique_ptr<Ring> ring, Identity identity);

  std::unique_ptr<Ring> ring_;
  Identity identity_;
  RecoveryStats recovered_;
  static constexpr uint64_t kPeerRecoveryPeriodNs = 1'000'000'000;
  // Atomic: heartbeat() may be called from a worker's loop and its helper threads.
  std::atomic<uint64_t> next_peer_recovery_ns_{0};
  std::function<void(const std::string&)> damage_handler_;  // set before the loops start
  std::atomic<bool> ring_damaged_{false};
  // Set before the loops start, only read after.
  std::vector<std::function<void(uint64_t)>> heartbeat_duties_;
  std::vector<std::function<void()>> running_duties_;
};

}  // namespace hsring
