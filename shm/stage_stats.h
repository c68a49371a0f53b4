// Statistics of what a process's stage counters (shm/stage_timer.h) recorded between two
// readings of them: count, mean, p50 and p99 per stage over an interval. One computation
// for the workers' profile log (--profile-interval) and for `hsring status`.
//
// Reading takes no lock and writes nothing: each counter is a relaxed atomic, copied on its
// own. record_stage() bumps count, then total_ns, then one bucket, so a reading taken while
// a stage is recorded may hold that sample in some fields and not yet in others. The
// statistics therefore count samples by what the buckets hold; the mean divides the total
// by the count field. Either is off by at most the samples in flight at the two readings.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "shm/ring_layout.h"

namespace hsring {

// A plain copy of one StageCounter at one instant.
struct StageHistogram {
  uint64_t count = 0;
  uint64_t total_ns = 0;
  uint64_t buckets[StageCounter::kBuckets] = {};
};

// Every stage of one process, indexed by Stage.
using StageHistograms = std::array<StageHistogram, kStageCount>;

StageHistogram read_stage(const StageCounter& counter);
StageHistograms read_stages(const ProcessEntry& entry);

// What happened between two readings of one counter: `after - before`, field by field.
// A field that went down (never, while one ring lives) counts as 0.
StageHistogram histogram_diff(const StageHistogram& before, const StageHistogram& after);

// Bucket b of a StageCounter holds durations in [2^b, 2^(b+1)) ns; bucket 0 also holds 0.
// The last bucket holds everything longer too; its upper bound is nominal.
double bucket_lower_ns(uint32_t bucket);
double bucket_upper_ns(uint32_t bucket);

// The q-quantile (q in [0, 1], clamped) of the durations `h`'s buckets hold, in ns: the
// bucket that holds rank q*n, interpolated linearly inside it (Prometheus's
// histogram_quantile does the same). 0 when the buckets are empty. Non-decreasing in q,
// and never above the upper bound of the highest non-empty bucket.
double histogram_quantile_ns(const StageHistogram& h, double q);

struct StageStats {
  uint64_t count = 0;  // samples the buckets hold
  double mean_ns = 0;
  double p50_ns = 0;
  double p99_ns = 0;
};

// Statistics of the samples in `h` (usually a histogram_diff). All zero when empty.
StageStats stage_stats(const StageHistogram& h);

// The profile log line of one interval: "profile 5.0 s: target.forward count=1200
// mean_ms=3.512 p50_ms=3.400 p99_ms=5.900; target.copy ...", the stages timed in the
// interval in pipeline order, or "profile 5.0 s: no stage timed".
std::string format_stage_profile(const StageHistograms& before, const StageHistograms& after,
                                 double interval_s);

}  // namespace hsring
