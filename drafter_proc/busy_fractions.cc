#include "drafter_proc/busy_fractions.h"

#include <algorithm>

#include "common/clock.h"

namespace hsring {

BusyFractions::BusyFractions(const Ring& ring)
    : ring_(ring), last_ns_(monotonic_ns()), last_busy_ns_(ring.process_count()) {
  for (uint32_t i = 0; i < ring.process_count(); ++i) last_busy_ns_[i] = busy_ns(i);
}

uint64_t BusyFractions::busy_ns(uint32_t process) const {
  const ProcessEntry& entry = ring_.process(process);
  uint64_t total = 0;
  // Relaxed, like the writes: statistics, each counter read on its own.
  for (uint32_t s = 0; s < kStageCount; ++s)
    if (is_work_stage(Stage(s))) total += entry.stages[s].total_ns.load(std::memory_order_relaxed);
  return total;
}

BusyFractions::Reading BusyFractions::next() {
  const uint64_t now = monotonic_ns();
  const double wall_ns = double(std::max<uint64_t>(now - last_ns_, 1));
  last_ns_ = now;
  const uint32_t targets = ring_.shape().num_targets;
  double target_sum = 0, drafter_sum = 0;
  for (uint32_t i = 0; i < ring_.process_count(); ++i) {
    const uint64_t busy = busy_ns(i);
    // A counter never goes down while one ring lives; if it did, count nothing.
    const uint64_t delta = busy >= last_busy_ns_[i] ? busy - last_busy_ns_[i] : 0;
    last_busy_ns_[i] = busy;
    const double fraction = std::clamp(double(delta) / wall_ns, 0.0, 1.0);
    (i < targets ? target_sum : drafter_sum) += fraction;
  }
  Reading r;
  if (targets > 0) r.target = target_sum / targets;
  if (ring_.process_count() > targets) r.drafter = drafter_sum / (ring_.process_count() - targets);
  return r;
}

}  // namespace hsring
