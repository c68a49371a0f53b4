// The age of a worker's last heartbeat as `status` and the metrics show it, from the
// process table's heartbeat_unix_ns (shm/worker_session.h stamps it on every heartbeat).
#pragma once

#include <cstdint>
#include <optional>

#include "shm/ring_layout.h"

namespace hsring {

// Seconds between `entry`'s last heartbeat and `now_unix_ns`; nullopt when it never beat.
// A heartbeat stamped after `now_unix_ns` (another clock, a step of the wall clock) is 0 s
// old rather than negative.
inline std::optional<double> heartbeat_age_s(const ProcessEntry& entry, uint64_t now_unix_ns) {
  // Relaxed: a statistic; nothing else is read through it.
  const uint64_t beat = entry.heartbeat_unix_ns.load(std::memory_order_relaxed);
  if (beat == 0) return std::nullopt;
  return now_unix_ns > beat ? double(now_unix_ns - beat) / 1e9 : 0.0;
}

}  // namespace hsring
