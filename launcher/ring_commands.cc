#include "launcher/ring_commands.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <filesystem>
#include <iostream>

#include "common/error.h"
#include "common/syscheck.h"
#include "drafter_proc/grad_exchange.h"
#include "shm/liveness.h"
#include "shm/ring.h"
#include "shm/segment_file.h"

namespace hsring {

namespace {

// pidfd_open(2) and pidfd_send_signal(2), through syscall(2): older C libraries lack them.
int open_pidfd(pid_t pid) { return int(::syscall(SYS_pidfd_open, pid, 0)); }
int signal_pidfd(int pidfd, int signo) {
  return int(::syscall(SYS_pidfd_send_signal, pidfd, signo, nullptr, 0));
}

int refuse_stop(const std::string& name, pid_t pid) {
  std::cerr << "hsring stop: ring '" << name << "' has no live launcher (the header names pid "
            << pid << ", which does not hold the ring's launcher lock): nothing signalled; "
            << "under systemd: systemctl stop hsring.target; `hsring ring remove " << name
            << "` removes a stale segment\n";
  return 1;
}

}  // namespace

int stop_ring(const std::string& name) {
  auto ring = Ring::attach(name, Ring::Access::kReadOnly);
  // The header's pid is only a claim: anyone who can write the segment can write any pid
  // there. Signal it only once the kernel shows that very process holding the launcher's
  // liveness lock on this file. The pidfd is taken first, so the proof and the signal are
  // about one process: if the pid dies and is reused after pidfd_open, the signal fails.
  const pid_t pid = ring->header().launcher_pid.load(std::memory_order_relaxed);
  if (pid <= 0 || !liveness_lock_held_elsewhere(ring->fd(), kLauncherLockIndex))
    return refuse_stop(name, pid);
  const int pidfd = open_pidfd(pid);
  if (pidfd < 0) return refuse_stop(name, pid);
  if (!process_holds_liveness_lock(pid, ring->fd(), kLauncherLockIndex)) {
    ::close(pidfd);
    return refuse_stop(name, pid);
  }
  const int signalled = signal_pidfd(pidfd, SIGTERM);
  const int err = errno;
  ::close(pidfd);
  if (signalled != 0) {
    std::cerr << "hsring stop: cannot signal the launcher of ring '" << name << "' (pid " << pid
              << "): " << errno_text(err) << "\n";
    return 1;
  }
  std::cerr << "hsring stop: asked the launcher of ring '" << name << "' (pid " << pid
            << ") to drain and stop\n";
  return 0;
}

int remove_ring(const std::string& name, bool force) {
  if (std::string why = ring_name_problem(name); !why.empty())
    throw Error(Errc::kRingBadName, "bad ring name: " + why);
  const std::string path = Ring::path_of(name);
  {
    // Judged from the file, not from its contents: the owner first (a foreign file is never
    // ours to remove; its mode is not checked, since a file that is not a ring may have any),
    // then the liveness locks (nothing in the header is consulted, so a live ring whose
    // header was damaged still counts as live), then the magic.
    SegmentFile file =
        SegmentFile::open(name, "ring '" + name + "'", SegmentFile::Open::kExisting,
                          SegmentFile::Access::kReadOnly, SegmentFile::Check::kOwnerOnly);
    if (any_liveness_lock_held_elsewhere(file.fd())) {
      if (!force) {
        std::cerr << "hsring ring remove: ring '" << name
                  << "' still has live processes; `hsring stop --ring " << name
                  << "` first, or --force to unlink it anyway\n";
        return 1;
      }
      std::cerr << "hsring ring remove: note: ring '" << name
                << "' still has live processes; removing it anyway (--force)\n";
    }
    uint64_t magic = 0;
    const ssize_t got = ::pread(file.fd(), &magic, sizeof magic, 0);
    if (got != ssize_t(sizeof magic) || magic != kRingMagic) {
      if (!force) {
        std::cerr << "hsring ring remove: " << path
                  << " is not an hsring segment (no hsring magic): not removed; --force removes "
                     "it anyway\n";
        return 1;
      }
      std::cerr << "hsring ring remove: note: " << path
                << " is not an hsring segment (no hsring magic); removing it anyway (--force)\n";
    } else {
      // Stale and ours: a damaged header is worth a note, not a refusal.
      try {
        Ring::attach(name, Ring::Access::kReadOnly);
      } catch (const Error& e) {
        std::cerr << "hsring ring remove: note: " << e.what() << "\n";
      }
    }
  }
  // A CPU drafter group's gradient exchange, if any, when it is ours.
  const std::string grads = GradExchange::name_for(name);
  try {
    SegmentFile::open(grads, "gradient exchange '" + grads + "'", SegmentFile::Open::kExisting,
                      SegmentFile::Access::kReadOnly, SegmentFile::Check::kOwnerOnly);
    GradExchange::remove(grads);
  } catch (const Error& e) {
    if (e.code() != Errc::kRingNotFound)
      std::cerr << "hsring ring remove: note: left " << Ring::path_of(grads) << ": " << e.what()
                << "\n";
  }
  if (!Ring::remove(name)) {
    std::cerr << "hsring ring remove: could not remove " << path << "\n";
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
      if (any_liveness_lock_held_elsewhere(ring->fd())) continue;
    } catch (const Error&) {
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
