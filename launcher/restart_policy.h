// When to restart a crashed worker, and when to give up: exponential backoff for a crash
// loop, a fast restart for a worker that was doing its work (it made progress, or ran
// healthy_after_ns), and a crash-loop limit. Pure logic on timestamps, so tests can drive
// it with any clock.
#pragma once

#include <cstdint>
#include <deque>

namespace hsring {

struct RestartLimits {
  uint64_t initial_delay_ns = 100'000'000;     // 100 ms
  uint64_t max_delay_ns = 10'000'000'000;      // 10 s
  uint64_t healthy_after_ns = 30'000'000'000;  // a run this long resets the backoff
  uint32_t max_crashes = 5;                    // crashes within `window_ns` that stop the run
  uint64_t window_ns = 60'000'000'000;
};

class RestartPolicy {
 public:
  explicit RestartPolicy(RestartLimits limits) : limits_(limits) {}

  // Records a start of the worker at `now_ns`.
  void on_start(uint64_t now_ns) { started_ns_ = now_ns; }

  // Records a crash at `now_ns`; `made_progress`: the worker published or consumed a batch
  // since its start. A crash after progress (or after healthy_after_ns of running) is a
  // worker killed while it worked (the OOM killer, an operator, chaos), not a loop: it
  // restarts after the initial delay and the crashes before it no longer count. Returns
  // false when this crash makes a crash loop (max_crashes within the window, none of them
  // after progress): the worker must not be restarted.
  bool on_crash(uint64_t now_ns, bool made_progress);

  // The delay before the restart that follows the last crash.
  uint64_t restart_delay_ns() const { return delay_ns_; }
  uint32_t crashes_in_window() const { return uint32_t(crash_times_.size()); }

 private:
  RestartLimits limits_;
  uint64_t started_ns_ = 0;
  uint64_t delay_ns_ = 0;
  std::deque<uint64_t> crash_times_;
};

}  // namespace hsring
