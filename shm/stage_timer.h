// Timing of pipeline stages into a process's counters in the segment, so `hsring status`
// can show them live. Relaxed atomics: these are statistics with no ordering duties.
#pragma once

#include <bit>

#include "common/clock.h"
#include "shm/ring_layout.h"

namespace hsring {

inline void record_stage(ProcessEntry& entry, Stage stage, uint64_t duration_ns) noexcept {
  StageCounter& c = entry.stages[uint32_t(stage)];
  c.count.fetch_add(1, std::memory_order_relaxed);
  c.total_ns.fetch_add(duration_ns, std::memory_order_relaxed);
  uint64_t max = c.max_ns.load(std::memory_order_relaxed);
  while (duration_ns > max &&
         !c.max_ns.compare_exchange_weak(max, duration_ns, std::memory_order_relaxed)) {
  }
  const uint32_t bucket = std::min<uint32_t>(StageCounter::kBuckets - 1,
                                             duration_ns ? std::bit_width(duration_ns) - 1 : 0);
  c.log2_histogram[bucket].fetch_add(1, std::memory_order_relaxed);
}

// Records the time from construction to destruction (or to stop()).
class StageTimer {
 public:
  StageTimer(ProcessEntry& entry, Stage stage)
      : entry_(entry), stage_(stage), start_(monotonic_ns()) {}
  ~StageTimer() { stop(); }
  uint64_t start_ns() const { return start_; }  // CLOCK_MONOTONIC at construction
  void stop() {
    if (stopped_) return;
    stopped_ = true;
    record_stage(entry_, stage_, monotonic_ns() - start_);
  }

 private:
  ProcessEntry& entry_;
  Stage stage_;
  uint64_t start_;
  bool stopped_ = false;
};

}  // namespace hsring
