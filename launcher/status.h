// `hsring status` and `hsring ring inspect`: a read-only view of a ring's processes and
// slots, with rates and stage timings over an interval. Reading never writes to the segment.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shm/ring.h"
#include "shm/stage_stats.h"

namespace hsring {

struct StatusOptions {
  bool json = false;
  // Rates and stage statistics cover this many seconds between two readings of the
  // counters; 0: everything since the ring was created (no rates).
  double interval_s = 1.0;
};

// One reading of the counters that status shows over an interval.
struct StatusSample {
  struct Process {
    uint64_t batches = 0, tokens = 0, hs_bytes = 0;
    StageHistograms stages{};
  };
  uint64_t at_ns = 0;  // CLOCK_MONOTONIC
  std::vector<Process> processes;
};

StatusSample read_status_sample(const Ring& ring);

// Status with rates and stage statistics over [before, after]; the rest is read now.
// REQUIRES: both samples are of `ring`.
std::string render_status(const Ring& ring, const StatusSample& before, const StatusSample& after,
                          const StatusOptions& options);

// Reads the counters, waits options.interval_s, reads them again and renders.
std::string render_status(const Ring& ring, const StatusOptions& options);

}  // namespace hsring
