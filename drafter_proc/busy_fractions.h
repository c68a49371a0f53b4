// How busy the ring's workers were between two readings, from their stage counters in the
// segment (shm/stage_timer.h): targets in their forward, drafters in copying batches out
// (verify, H2D, noise) and in their steps. Drafter 0 reads it once per step for the
// training curves (curves/training_curves.h).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "shm/ring.h"

namespace hsring {

class BusyFractions {
 public:
  // The first interval starts now.
  explicit BusyFractions(const Ring& ring);

  struct Reading {
    // Mean over the role's processes of (time in its work stages) / (wall time); none
    // when the ring has no process of that role. A stage is counted when it ends, so one
    // interval may hold a stage that began in the previous one: clamped to [0, 1].
    std::optional<double> target, drafter;
  };
  // Over the interval since the previous call (or construction), which it then restarts.
  Reading next();

 private:
  uint64_t busy_ns(uint32_t process) const;

  const Ring& ring_;
  uint64_t last_ns_;
  std::vector<uint64_t> last_busy_ns_;  // per process index
};

}  // namespace hsring
