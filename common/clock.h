// Clocks used across hsring: monotonic for durations and slot ages, wall clock for what
// a person reads (status, summaries).
#pragma once

#include <cstdint>
#include <ctime>

namespace hsring {

inline uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// Cheap (the vDSO returns the time of the last timer tick without reading the TSC: a few
// ns) but only tick-accurate (1-4 ms): for slot ages shown to people, never for
// measurements.
inline uint64_t coarse_monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

inline uint64_t unix_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

}  // namespace hsring
