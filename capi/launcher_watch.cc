#include "capi/launcher_watch.h"

#include <cstdlib>

#include "common/clock.h"
#include "shm/liveness.h"

namespace hsring::capi {

namespace {
constexpr uint64_t kProbePeriodNs = 200'000'000;
}

LauncherWatch::LauncherWatch(const Ring& ring)
    : ring_(ring), watching_(std::getenv("HSRING_LAUNCHER_PID") != nullptr) {}

bool LauncherWatch::gone() {
  if (!watching_ || gone_) return gone_;
  const uint64_t now = monotonic_ns();
  if (now < next_probe_ns_) return false;
  next_probe_ns_ = now + kProbePeriodNs;
  gone_ = !liveness_lock_held_elsewhere(ring_.fd(), kLauncherLockIndex);
  return gone_;
}

}  // namespace hsring::capi
