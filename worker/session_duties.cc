#include "worker/session_duties.h"

#include "common/clock.h"
#include "common/sd_notify.h"

namespace hsring {

ProfileLog::ProfileLog(const ProcessEntry& entry, uint64_t period_ns,
                       std::function<void(const std::string&)> sink)
    : entry_(entry), period_ns_(period_ns), sink_(std::move(sink)) {
  base_ = read_stages(entry_);
  base_ns_ = monotonic_ns();
  next_ns_.store(base_ns_ + period_ns_, std::memory_order_relaxed);
}

void ProfileLog::tick(uint64_t now_ns) {
  // Relaxed: a stale value only delays or repeats the test, which is repeated under the
  // mutex.
  if (now_ns < next_ns_.load(std::memory_order_relaxed)) return;
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock() || now_ns < next_ns_.load(std::memory_order_relaxed)) return;
  next_ns_.store(now_ns + period_ns_, std::memory_order_relaxed);
  const StageHistograms now = read_stages(entry_);
  sink_(format_stage_profile(base_, now, double(now_ns - base_ns_) / 1e9));
  base_ = now;
  base_ns_ = now_ns;
}

void attach_session_duties(WorkerSession& session, uint64_t profile_period_ns,
                           std::function<void(const std::string&)> sink) {
  // Under systemd, "running" is READY=1: attached, recovered, and (GPU) pinned.
  session.on_running(notify_ready);
  session.on_heartbeat([](uint64_t) { notify_watchdog(); });
  if (profile_period_ns == 0 || !sink) return;
  auto log = std::make_shared<ProfileLog>(session.entry(), profile_period_ns, std::move(sink));
  session.on_heartbeat([log](uint64_t now_ns) { log->tick(now_ns); });
}

}  // namespace hsring
