// A worker's membership in a ring for its lifetime. Starting one takes the liveness lock
// of the worker's process index (waiting briefly for a dying predecessor to let go),
// opens a new epoch, and returns the slots of the previous epochs; destroying it after a
// clean exit marks the worker exited.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "shm/recovery.h"
#include "shm/ring.h"
#include "shm/slot_claim.h"
#include "shm/stage_stats.h"

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

  // Records the state; kRunning also stamps a heartbeat (the setup before it is not a
  // hang) and tells systemd READY=1.
  void set_state(ProcessState state);
  // Marks progress: heartbeat time, systemd watchdog, (once a second) recovery of dead
  // peers' slots and the check that the ring is intact, and (once a profile period) the
  // profile line.
  void heartbeat();

  // `handler` is called once, from heartbeat(), when Ring::check_intact() finds that the
  // live header no longer equals what was validated at attach, or the segment shrank:
  // another process wrote into it. The worker goes on with its own validated copy (no
  // pointer it computes leaves the mapping) and should stop.
  // REQUIRES: no other thread calls heartbeat() yet (the loops have not started).
  void on_ring_damage(std::function<void(const std::string&)> handler);
  // True once heartbeat() found the ring damaged.
  bool ring_damaged() const { return ring_damaged_.load(std::memory_order_relaxed); }

  // From now on, once every `period_ns`, heartbeat() hands `sink` one line with this
  // worker's stage timings over the period (format_stage_profile): read from the
  // counters in its ProcessEntry, so the stages' hot paths do nothing more.
  // REQUIRES: no other thread calls heartbeat() yet (the loops have not started).
  void enable_profile(uint64_t period_ns, std::function<void(const std::string&)> sink);

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

  // Profile log. Thread safety: period and sink are set before the loops start and only
  // read after. next_profile_ns_ is the fast-path test (a relaxed load per heartbeat);
  // the thread that finds it due takes profile_mutex_ with try_lock (others skip, never
  // wait) and re-checks under it, so one thread per period reads, logs and moves the base.
  void log_profile(uint64_t now_ns);
  uint64_t profile_period_ns_ = 0;  // 0: off
  std::function<void(const std::string&)> profile_sink_;
  std::atomic<uint64_t> next_profile_ns_{UINT64_MAX};
  std::mutex profile_mutex_;
  StageHistograms profile_base_{};  // GUARDED_BY(profile_mutex_)
  uint64_t profile_base_ns_ = 0;    // GUARDED_BY(profile_mutex_)
};

}  // namespace hsring
