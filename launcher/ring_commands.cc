#include "launcher/ring_commands.h"

#include <signal.h>

#include <filesystem>
#include <iostream>

#include "shm/grad_exchange.h"
#include "shm/liveness.h"
#include "shm/ring.h"

namespace hsring {

namespace {

bool any_process_alive(const Ring& ring) {
  if (liveness_lock_held_elsewhere(ring.fd(), kLauncherLockIndex)) return true;
  for (uint32_t i = 0; i < ring.process_count(); ++i)
    if (liveness_lock_held_elsewhere(ring.fd(), i)) return true;
  return false;
}

}  // namespace

int stop_ring(const std::string& name) {
  auto ring = Ring::attach(name, Ring::Access::kReadOnly);
  if (!liveness_lock_held_elsewhere(ring->fd(), kLauncherLockIndex)) {
    std::cerr << "hsring stop: no launcher is running ring '" << name
              << "' (under systemd: systemctl stop hsring.target); `hsring ring remove " << name
              << "` removes a stale segment\n";
    return 1;
  }
  const pid_t pid = ring->header().launcher_pid.load(std::memory_order_relaxed);
  if (pid <= 0 || ::kill(pid, SIGTERM) != 0) {
    std::cerr << "hsring stop: cannot signal the launcher (pid " << pid << ")\n";
    return 1;
  }
  std::cerr << "hsring stop: asked the launcher of ring '" << name << "' (pid " << pid
            << ") to drain and stop\n";
  return 0;
}

int remove_ring(const std::string& name, bool force) {
  try {
    auto ring = Ring::attach(name, Ring::Access::kReadOnly);
    if (any_process_alive(*ring) && !force) {
      std::cerr << "hsring ring remove: ring '" << name
                << "' still has live processes; `hsring stop --ring " << name
                << "` first, or --force to unlink it anyway\n";
      return 1;
    }
  } catch (const RingError& e) {
    // A corrupt segment can still be removed by its owner; a foreign one cannot.
    if (e.code() == RingErrc::kNotFound || e.code() == RingErrc::kForeignOwner ||
        e.code() == RingErrc::kBadName)
      throw;
    std::cerr << "hsring ring remove: note: " << e.what() << "\n";
  }
  GradExchange::remove(GradExchange::name_for(name));  // a CPU drafter group's, if any
  if (!Ring::remove(name)) {
    std::cerr << "hsring ring remove: could not remove " << Ring::path_of(name) << "\n";
    return 1;
  }
  std::cerr << "removed ring '" << name << "'\n";
  return 0;
}

int gc_rings(bool dry_run) {
  int removed = 0;
  std::error_code ec;
  for (const auto& file : std::filesystem::directory_iterator("/dev/shm", ec)) {
    if (!file.is_regular_file(ec)) continue;
    const std::string name = file.path().filename().string();
    try {
      auto ring = Ring::attach(name, Ring::Access::kReadOnly);
      if (any_process_alive(*ring)) continue;
    } catch (const RingError&) {
      continue;  // not an hsring ring, or not ours: never touch it
    }
    std::cerr << (dry_run ? "would remove" : "removing") << " stale ring '" << name << "'\n";
    if (!dry_run && Ring::remove(name)) ++removed;
    if (!dry_run) GradExchange::remove(GradExchange::name_for(name));
  }
  std::cerr << "hsring ring gc: " << removed << " stale ring(s) removed\n";
  return 0;
}

}  // namespace hsring
