// What a worker's session does beside the ring's own duties, hung on WorkerSession's hooks:
// systemd's READY=1 at the step to running and WATCHDOG=1 from every heartbeat (from the
// loop that makes progress, so a hung loop stops the pings), and the profile log.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "shm/stage_stats.h"
#include "shm/worker_session.h"

namespace hsring {

// Once every `period_ns`, one line with a worker's stage timings over the period
// (format_stage_profile), read from the counters in its ProcessEntry, so the stages' hot
// paths do nothing more. Thread safety: tick() from any thread. next_ns_ is the fast-path
// test (a relaxed load per heartbeat); the thread that finds it due takes mutex_ with
// try_lock (others skip, never wait) and re-checks under it, so one thread per period
// reads, logs and moves the base.
class ProfileLog {
 public:
  // The counters live as long as the ring and carry earlier epochs' samples: the first
  // line covers only what this incarnation records from construction on.
  ProfileLog(const ProcessEntry& entry, uint64_t period_ns,
             std::function<void(const std::string&)> sink);
  void tick(uint64_t now_ns);

 private:
  const ProcessEntry& entry_;
  const uint64_t period_ns_;
  const std::function<void(const std::string&)> sink_;
  std::atomic<uint64_t> next_ns_;
  std::mutex mutex_;
  StageHistograms base_{};  // GUARDED_BY(mutex_)
  uint64_t base_ns_ = 0;    // GUARDED_BY(mutex_)
};

// systemd's notifications (no-ops outside systemd), and a profile line to `sink` every
// `profile_period_ns` (0: none). REQUIRES: as WorkerSession::on_heartbeat.
void attach_session_duties(WorkerSession& session, uint64_t profile_period_ns,
                           std::function<void(const std::string&)> sink);

}  // namespace hsring
