#include "launcher/restart_policy.h"

#include <algorithm>

namespace hsring {

bool RestartPolicy::on_crash(uint64_t now_ns, bool made_progress) {
  const bool was_healthy = made_progress || now_ns - started_ns_ >= limits_.healthy_after_ns;
  delay_ns_ = (was_healthy || delay_ns_ == 0) ? limits_.initial_delay_ns
                                              : std::min(limits_.max_delay_ns, delay_ns_ * 2);
  // A loop is crashes with no work between them: work done ends the one before.
  if (made_progress) crash_times_.clear();
  crash_times_.push_back(now_ns);
  while (!crash_times_.empty() && now_ns - crash_times_.front() > limits_.window_ns)
    crash_times_.pop_front();
  return crash_times_.size() < limits_.max_crashes;
}

}  // namespace hsring
