#include "shm/worker_session.h"

#include <fmt/format.h>

#include <unistd.h>

#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "shm/liveness.h"

namespace hsring {

WorkerSession::WorkerSession(std::unique_ptr<Ring> ring, Identity identity)
    : ring_(std::move(ring)), identity_(identity) {}

std::unique_ptr<WorkerSession> WorkerSession::start(std::unique_ptr<Ring> ring, uint32_t index,
                                                    Role role,
                                                    std::chrono::milliseconds lock_wait) {
  const std::string where = "ring '" + ring->name() + "'";
  if (index >= ring->process_count()) {
    throw Error(Errc::kRingBadShape, fmt::format("{} has {} worker slots; index {} does not exist",
                                                 where, ring->process_count(), index));
  }
  ProcessEntry& entry = ring->process(index);
  const auto actual = Role(entry.role.load(std::memory_order_relaxed));
  if (actual != role) {
    throw Error(Errc::kRingBadShape, fmt::format("{}: worker {} is a {}, not a {}", where, index,
                                                 to_string(actual), to_string(role)));
  }
  // A predecessor that is being killed releases its lock as its files close; give it a
  // moment rather than failing a restart that races its death.
  const auto deadline = std::chrono::steady_clock::now() + lock_wait;
  while (!try_hold_liveness_lock(ring->fd(), index)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      throw Error(
          Errc::kRingProcessBusy,
          fmt::format("{}: {} {} is already running (pid {}); stop it first, or pick "
                      "another index",
                      where, to_string(role), index, entry.pid.load(std::memory_order_relaxed)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ring->set_liveness_index(int32_t(index));

  // acq_rel: the new epoch is ordered after taking the lock, so a recoverer that sees it
  // also sees the lock held (owner_alive checks epoch, then lock).
  const uint32_t epoch = entry.epoch.fetch_add(1, std::memory_order_acq_rel) + 1;
  entry.pid.store(::getpid(), std::memory_order_relaxed);
  entry.state.store(uint32_t(ProcessState::kStarting), std::memory_order_relaxed);
  entry.starts.fetch_add(1, std::memory_order_relaxed);
  entry.started_unix_ns.store(unix_ns(), std::memory_order_relaxed);
  entry.heartbeat_unix_ns.store(unix_ns(), std::memory_order_relaxed);

  auto session = std::unique_ptr<WorkerSession>(new WorkerSession(std::move(ring), {index, epoch}));
  session->recovered_ = recover_previous_epochs(session->ring(), session->identity_);
  entry.recovered.fetch_add(session->recovered_.total(), std::memory_order_relaxed);
  return session;
}

WorkerSession::~WorkerSession() {
  // The kernel drops the liveness lock when the Ring closes its descriptor.
  set_state(ProcessState::kExited);
}

void WorkerSession::set_state(ProcessState state) {
  // A fresh heartbeat with the step to running: what came before (model loading, GPU
  // setup) is not the loop's silence, and the launcher's hang clock starts here.
  if (state == ProcessState::kRunning)
    entry().heartbeat_unix_ns.store(unix_ns(), std::memory_order_relaxed);
  entry().state.store(uint32_t(state), std::memory_order_relaxed);
  if (state == ProcessState::kRunning)
    for (const auto& duty : running_duties_) duty();
}

void WorkerSession::heartbeat() {
  entry().heartbeat_unix_ns.store(unix_ns(), std::memory_order_relaxed);
  // Peers recover each other too: under systemd no launcher watches the workers, and a
  // dead drafter's slots should go back to READY before its own restart.
  const uint64_t now = monotonic_ns();
  uint64_t due = next_peer_recovery_ns_.load(std::memory_order_relaxed);
  // Relaxed CAS: it only elects which caller recovers this period; recovery itself is
  // ordered by the slot CASes.
  if (now >= due && next_peer_recovery_ns_.compare_exchange_strong(due, now + kPeerRecoveryPeriodNs,
                                                                   std::memory_order_relaxed)) {
    const RecoveryStats stats = recover_dead_owners(*ring_);
    entry().recovered.fetch_add(stats.total(), std::memory_order_relaxed);
    // Only the elected caller gets here, once a period: exchange() then reports once.
    if (std::string damage = ring_->check_intact();
        !damage.empty() && !ring_damaged_.exchange(true, std::memory_order_relaxed) &&
        damage_handler_)
      damage_handler_(damage);
  }
  for (const auto& duty : heartbeat_duties_) duty(now);
}

void WorkerSession::on_ring_damage(std::function<void(const std::string&)> handler) {
  damage_handler_ = std::move(handler);
}

void WorkerSession::on_heartbeat(std::function<void(uint64_t now_ns)> duty) {
  heartbeat_duties_.push_back(std::move(duty));
}

void WorkerSession::on_running(std::function<void()> duty) {
  running_duties_.push_back(std::move(duty));
}

}  // namespace hsring
