// Whether the launcher that started this worker is still alive, judged as the protocol
// judges every process (docs/ring-protocol.md, "Liveness"): by the launcher's liveness
// lock on the ring's file, never by a pid. A user command may run under a shell, so
// "the launcher is my parent" (common/signals.h) does not hold for it.
#pragma once

#include <cstdint>

#include "shm/ring.h"

namespace hsring::capi {

class LauncherWatch {
 public:
  // Watches only when HSRING_LAUNCHER_PID says a launcher started this process.
  explicit LauncherWatch(const Ring& ring);
  // True once the launcher's lock is free. One probe (a system call) per 200 ms at most.
  bool gone();

 private:
  const Ring& ring_;
  bool watching_ = false;
  bool gone_ = false;
  uint64_t next_probe_ns_ = 0;
};

}  // namespace hsring::capi
