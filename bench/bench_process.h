// Process plumbing for the ring benchmark: shared anonymous mappings, children that are
// forked, set up and then started together, and removal of the named shared memory the
// benchmark creates, also when it fails or is interrupted.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace hsring::bench {

// Bounds on a measurement's phases: past them the run is stalled, not slow.
inline constexpr std::chrono::seconds kSetupLimit{30};
inline constexpr std::chrono::seconds kRunLimit{120};

// A MAP_SHARED | MAP_ANONYMOUS mapping. Made before fork, it is the same memory in the
// parent and in every child: the place for barriers, results and baseline queues.
class SharedMapping {
 public:
  explicit SharedMapping(size_t bytes);  // zero-filled; throws std::system_error
  ~SharedMapping();
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_;
  size_t size_;
};

// What one child reports back. Written by the child before it exits; the parent reads it
// after waitpid, which orders the child's writes before the parent's reads.
struct alignas(64) ChildReport {
  std::atomic<uint64_t> end_ns;    // CLOCK_MONOTONIC when its measured work finished
  std::atomic<uint64_t> checksum;  // sum of the message ids it handled
  std::atomic<uint64_t> count;     // messages it handled
  // Context switches during the measured work: voluntary ones are sleeps (futex waits),
  // involuntary ones are preemptions by the scheduler.
  std::atomic<uint64_t> voluntary_switches;
  std::atomic<uint64_t> involuntary_switches;
};

// Counts this process's context switches between construction and record().
class SwitchCounter {
 public:
  SwitchCounter();
  void record(ChildReport& report) const;

 private:
  long voluntary_;
  long involuntary_;
};

// Paces one wait that polls a shared word. It spins (with a CPU pause) for the first
// kSpinWindowNs, which covers a hand-off between two running cores, then yields the core on
// every poll: with more runnable processes than cores, a poller that kept spinning would
// burn the time slice its peer needs to make progress. Time-based, so that a cheap poll
// and an expensive one (a scan of the ring) get the same window.
class PollBackoff {
 public:
  static constexpr uint64_t kSpinWindowNs = 10'000;
  void pause();

 private:
  uint32_t polls_ = 0;
  uint64_t spin_until_ns_ = 0;
  bool yielding_ = false;
};

// The side of the start line a child sees.
class Child {
 public:
  Child(uint32_t rank, std::atomic<uint32_t>& arrived, std::atomic<uint32_t>& go,
        ChildReport& report)
      : rank_(rank), arrived_(arrived), go_(go), report_(report) {}

  uint32_t rank() const { return rank_; }
  // Says "set up" and sleeps until the parent starts everyone. Call after all setup
  // (attaching, page faults) so that none of it is timed.
  void wait_for_start();
  ChildReport& report() { return report_; }

 private:
  uint32_t rank_;
  std::atomic<uint32_t>& arrived_;
  std::atomic<uint32_t>& go_;
  ChildReport& report_;
};

// Children forked for one measurement. Each child runs its body and exits 0, or prints
// what went wrong and exits 1. Destroying the group SIGKILLs and reaps, by pid, any child
// still running, so an error in the parent leaves no stray processes.
class ChildGroup {
 public:
  static constexpr uint32_t kMaxChildren = 16;

  ChildGroup();
  ~ChildGroup();
  ChildGroup(const ChildGroup&) = delete;
  ChildGroup& operator=(const ChildGroup&) = delete;

  // Forks a child that runs `body`. Throws std::runtime_error beyond kMaxChildren.
  void spawn(const std::function<void(Child&)>& body);
  // Waits (at most `limit`) until every child waits at the start line, then releases them
  // all; returns the CLOCK_MONOTONIC time of the release. Throws if a child dies first.
  uint64_t start(std::chrono::nanoseconds limit);
  // Waits (at most `limit`) for every child to exit; throws naming the first failure.
  void wait_all(std::chrono::nanoseconds limit);

  const ChildReport& report(uint32_t rank) const;
  // The latest end_ns over all children: when the measured work as a whole finished.
  uint64_t latest_end_ns() const;

 private:
  struct StartLine;
  // Reaps whichever children have exited, without blocking; throws on a failed one.
  void reap_exited();
  void kill_running();

  struct Running {
    pid_t pid;
    uint32_t rank;
  };

  SharedMapping shared_;
  StartLine* line_;
  std::vector<Running> running_;
  uint32_t spawned_ = 0;
};

// Names of the shared-memory objects the benchmark creates: "hsring-bench-<pid>-<tag>".
// A registered name's /dev/shm entry is unlinked if SIGINT, SIGTERM, SIGHUP or SIGPIPE
// ends the run; normal and exception paths remove their objects through their owners'
// destructors.
std::string register_shm_name(const std::string& tag);
void install_cleanup_handlers();
// Unlinks /dev/shm/hsring-bench-<pid>-* left by runs whose pid no longer exists (killed
// with SIGKILL, which no handler sees). Returns how many it removed.
int remove_stale_shm();

}  // namespace hsring::bench
