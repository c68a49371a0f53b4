// Helpers shared by the unit tests: ring names that are unique per test process and are
// removed afterwards (stale ones of dead test processes first, iceoryx style), a small
// ring shape, and sanitizer detection for scaling the stress tests.
#pragma once

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "shm/ring.h"

namespace hsring::test {

inline constexpr char kRingPrefix[] = "hsring-unit-";

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kUnderTsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kUnderTsan = true;
#else
inline constexpr bool kUnderTsan = false;
#endif
#else
inline constexpr bool kUnderTsan = false;
#endif

// Removes rings named "hsring-unit-<pid>-..." whose test process no longer exists: a
// crashed or killed test run must not leave segments that fill /dev/shm over time.
inline void remove_stale_test_rings() {
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return;
  const std::string prefix = kRingPrefix;
  while (dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind(prefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid > 0 && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH) Ring::remove(name);
  }
  ::closedir(dir);
}

// A ring name owned by the current test: unique within this process and across
// processes, removed (if present) at construction and at destruction.
class ScopedRingName {
 public:
  explicit ScopedRingName(const std::string& tag = "ring") {
    static std::atomic<int> counter{0};
    static const bool cleaned = (remove_stale_test_rings(), true);
    (void)cleaned;
    name_ = std::string(kRingPrefix) + std::to_string(::getpid()) + "-" + tag + "-" +
            std::to_string(counter.fetch_add(1));
    Ring::remove(name_);
  }
  ~ScopedRingName() { Ring::remove(name_); }
  ScopedRingName(const ScopedRingName&) = delete;
  ScopedRingName& operator=(const ScopedRingName&) = delete;

  const std::string& str() const { return name_; }
  std::string path() const { return Ring::path_of(name_); }

 private:
  std::string name_;
};

// A ring that is cheap to create and to fill: tiny payloads, a small ledger.
inline RingShape tiny_shape() {
  RingShape shape;
  shape.slot_count = 8;
  shape.max_tokens = 16;
  shape.hidden_size = 8;
  shape.num_layers = 2;
  shape.dtype = DType::kBF16;
  shape.num_targets = 2;
  shape.num_drafters = 2;
  shape.hs_min_ready = 1;
  shape.ledger_capacity = 1024;
  return shape;
}

}  // namespace hsring::test
