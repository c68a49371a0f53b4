// The fixture of the end-to-end `hsring run` tests: a launcher started on a ring of its
// own, helpers to find, kill and await its workers, and the run's summary.
//
// The test process makes itself a child subreaper, so workers orphaned by a killed
// launcher become its children: it can watch them exit and reap them.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "shm/ring.h"
#include "tests/crash/process_util.h"

namespace hsring::launcher_testing {

using crash::Millis;
using crash::WorkerProcess;
using Clock = std::chrono::steady_clock;

inline constexpr Millis kStartLimit(30000);  // for a worker to appear, or the first batches
inline constexpr Millis kExitLimit(60000);   // for a launcher to finish once it should
inline constexpr Millis kOrphanLimit(5000);  // for workers to follow a killed launcher

inline double elapsed_ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

class LauncherTest : public ::testing::Test {
 public:
  std::string hsring() const { return crash::bin_dir() + "/hsring"; }

 protected:
  static void SetUpTestSuite() { ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0); }

  void SetUp() override {
    ring_ = crash::unique_ring_name();
    Ring::remove(ring_);
  }

  void TearDown() override {
    launcher_.reset();  // kills a launcher that is still running
    for (const WorkerProcess& w : seen_workers_) {
      if (crash::process_alive(w.id)) ::kill(w.id.pid, SIGKILL);
      crash::wait_child(w.id.pid, Millis(2000));  // an orphan adopted by us
    }
    Ring::remove(ring_);
  }

  std::string summary_path() const { return dir_.file("summary.json"); }
  // Where model runs keep checkpoints and the exported drafter, unless a test says.
  std::string run_dir() const { return dir_.file("run"); }
  pid_t launcher_pid() const { return launcher_->pid(); }

  // Starts `hsring run` on this test's ring. Unless `default_shape`, with a small slot
  // shape, so the runs are about supervision rather than payload bandwidth. Synthetic
  // (byte-verifiable) batches unless `flags` name a --model. `env` ("K=V") is added to the
  // launcher's environment (and so its workers').
  void start_run(const std::vector<std::string>& flags, bool default_shape = false,
                 const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv = {hsring(),         "run",         "--ring", ring_,
                                     "--summary-json", summary_path()};
    if (std::find(flags.begin(), flags.end(), "--model") == flags.end())
      argv.insert(argv.end(), {"--model", "synthetic"});
    else if (std::find(flags.begin(), flags.end(), "--run-dir") == flags.end() &&
             std::find(flags.begin(), flags.end(), "--resume") == flags.end())
      argv.insert(argv.end(), {"--run-dir", run_dir()});
    if (!default_shape) argv.insert(argv.end(), {"--max-tokens", "128", "--hidden-size", "64"});
    argv.insert(argv.end(), flags.begin(), flags.end());
    launcher_ = std::make_unique<crash::Spawned>(argv, dir_.file("launcher.out"),
                                                 dir_.file("launcher.err"), env);
  }

  // The launcher's exit code once it exits within `timeout`; -1 for a timeout or a signal.
  int wait_launcher(Millis timeout = kExitLimit) {
    const std::optional<int> status = launcher_->wait(timeout);
    if (!status) {
      ADD_FAILURE() << "the launcher did not exit within " << timeout.count() << " ms\n"
                    << launcher_->stderr_text();
      return -1;
    }
    if (!WIFEXITED(*status)) {
      ADD_FAILURE() << "the launcher ended with " << crash::describe_status(*status);
      return -1;
    }
    return WEXITSTATUS(*status);
  }

  // The worker `role` `index` once it runs and is not `previous`; nullopt when none
  // appears within `timeout` (or the launcher exits).
  std::optional<WorkerProcess> wait_for_worker(const std::string& role, uint32_t index,
                                               Millis timeout = kStartLimit,
                                               const WorkerProcess* previous = nullptr) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline && !launcher_->wait(Millis(0))) {
      std::optional<WorkerProcess> w = crash::find_worker(launcher_pid(), role, index);
      if (w && !(previous && w->id.pid == previous->id.pid &&
                 w->id.start_time == previous->id.start_time)) {
        seen_workers_.push_back(*w);
        return w;
      }
      std::this_thread::sleep_for(Millis(2));
    }
    return std::nullopt;
  }

  std::vector<WorkerProcess> workers_now() {
    std::vector<WorkerProcess> workers = crash::find_workers(launcher_pid());
    seen_workers_.insert(seen_workers_.end(), workers.begin(), workers.end());
    return workers;
  }

  // The batches the ring's drafters have consumed over all their incarnations; 0 while the
  // ring is not created (or not initialised) yet. Relaxed loads: a count to poll, nothing
  // read through it.
  uint64_t consumed_now() {
    try {
      auto ring = Ring::attach(ring_, Ring::Access::kReadOnly);
      uint64_t consumed = 0;
      for (uint32_t i = ring->shape().num_targets; i < ring->process_count(); ++i)
        consumed += ring->process(i).batches.load(std::memory_order_relaxed);
      return consumed;
    } catch (const Error&) {
      return 0;
    }
  }

  // Waits until the ring's drafters have consumed `batches`; false on timeout.
  bool wait_for_consumed(uint64_t batches, Millis timeout = kStartLimit) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline && !launcher_->wait(Millis(0))) {
      if (consumed_now() >= batches) return true;
      std::this_thread::sleep_for(Millis(20));
    }
    return false;
  }

  // Waits until target `index` has published `batches` over all its incarnations; false
  // on timeout.
  bool wait_for_published(uint32_t index, uint64_t batches, Millis timeout = kStartLimit) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline && !launcher_->wait(Millis(0))) {
      try {
        auto ring = Ring::attach(ring_, Ring::Access::kReadOnly);
        if (ring->process(index).batches.load(std::memory_order_relaxed) >= batches) return true;
      } catch (const Error&) {
        // Not created (or not initialised) yet.
      }
      std::this_thread::sleep_for(Millis(20));
    }
    return false;
  }

  // SIGKILLs worker `role` `index` and waits for the launcher to start its successor.
  // Returns the successor, or nullopt when none came.
  std::optional<WorkerProcess> kill_and_await_restart(const WorkerProcess& victim,
                                                      Millis timeout = kStartLimit) {
    ::kill(victim.id.pid, SIGKILL);
    return wait_for_worker(victim.role, victim.index, timeout, &victim);
  }

  double summary(const std::string& key) {
    const std::string json = crash::read_file(summary_path());
    const std::optional<double> value = crash::json_number(json, key);
    if (!value) ADD_FAILURE() << "summary has no '" << key << "':\n" << json;
    return value.value_or(-1);
  }

  void expect_data_intact() {
    EXPECT_EQ(summary("batches_torn"), 0);
    EXPECT_EQ(summary("batches_lost"), 0);
    EXPECT_EQ(summary("batches_duplicated"), 0);
  }

  // After the launcher exited: its segment is gone and no worker it ran is alive.
  void expect_cleaned_up() {
    EXPECT_FALSE(crash::segment_exists(ring_)) << "/dev/shm/" << ring_ << " was left behind";
    for (const WorkerProcess& w : seen_workers_) {
      EXPECT_FALSE(crash::process_alive(w.id))
          << w.role << " " << w.index << " (pid " << w.id.pid << ") outlived the launcher";
    }
  }

  std::string ring_;
  crash::TempDir dir_;
  std::unique_ptr<crash::Spawned> launcher_;
  std::vector<WorkerProcess> seen_workers_;
};

// What a training run's log says of drafters resuming from checkpoints: which drafter
// indexes logged "resumed from ... at step S" (CPU or GPU, any epoch) and every S.
struct Resumes {
  std::set<uint32_t> drafters;
  std::vector<uint64_t> steps;
};
inline Resumes resumes_in(const std::string& log) {
  static const std::regex resumed(
      "drafter (\\d+)(?: gpu \\d+)? epoch \\d+[^\\n]*resumed from \\S+ at step (\\d+)");
  Resumes r;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), resumed);
       it != std::sregex_iterator(); ++it) {
    r.drafters.insert(uint32_t(std::stoul((*it)[1])));
    r.steps.push_back(std::stoull((*it)[2]));
  }
  return r;
}

}  // namespace hsring::launcher_testing
