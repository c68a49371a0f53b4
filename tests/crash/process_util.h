// Process plumbing for the crash tests: unique ring names, spawning programs with their
// output captured, bounded waits, and finding a launcher's workers through /proc. Every
// wait here takes a timeout, so a hung process fails a test instead of hanging it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hsring::crash {

using Millis = std::chrono::milliseconds;

// A ring name no other test (or other run of this test) uses: hsring-crash-<pid>-<n>.
std::string unique_ring_name();

// Where hsring, hsring-target and hsring-drafter are: $HSRING_BIN_DIR, else the build's.
std::string bin_dir();

// True when /dev/shm/<name> exists.
bool segment_exists(const std::string& name);

// Reads a whole file; "" when it cannot be read.
std::string read_file(const std::string& path);

// A temporary directory removed (with its files) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Waits for child `pid` to exit, at most `timeout`; the wait status, or nullopt on timeout.
std::optional<int> wait_child(pid_t pid, Millis timeout);

// "exit 3", "signal 9"
std::string describe_status(int wait_status);

// A program run by a test, its stdout and stderr going to files. The destructor kills and
// reaps it if it is still running, so a failed test leaves no process behind.
class Spawned {
 public:
  // fork + exec of `argv` (argv[0] a path). `env` entries ("K=V") are added to ours. The
  // child gets SIGKILL if the test process dies.
  Spawned(const std::vector<std::string>& argv, const std::string& stdout_path,
          const std::string& stderr_path, const std::vector<std::string>& env = {});
  ~Spawned();
  Spawned(const Spawned&) = delete;
  Spawned& operator=(const Spawned&) = delete;

  pid_t pid() const { return pid_; }
  bool exited() const { return status_.has_value(); }
  // The wait status once it exited within `timeout`; nullopt while still running.
  std::optional<int> wait(Millis timeout);
  void signal(int signo) const;
  std::string stdout_text() const { return read_file(stdout_path_); }
  std::string stderr_text() const { return read_file(stderr_path_); }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
  std::string stdout_path_;
  std::string stderr_path_;
};

// Runs a short command to completion (killed after `timeout`).
struct CommandResult {
  bool timed_out = false;
  int exit_code = -1;  // -1 when killed by a signal
  std::string out;
  std::string err;
};
CommandResult run_command(const std::vector<std::string>& argv, Millis timeout = Millis(30000));

// A process seen in /proc, identified by pid and start time, so a reused pid is never
// mistaken for it.
struct ProcessId {
  pid_t pid = 0;
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22
};
// True while that very process exists and is not a zombie. Reaps it when it is our zombie
// (the crash tests make themselves a child subreaper, so orphans come to them).
bool process_alive(const ProcessId& process);

// A launcher's worker, found among its children in /proc.
struct WorkerProcess {
  ProcessId id;
  std::string role;  // "target" or "drafter"
  uint32_t index = 0;
};
// The exec'd hsring-target / hsring-drafter children of `launcher` (zombies excluded).
std::vector<WorkerProcess> find_workers(pid_t launcher);
// The worker `role` `index` of `launcher`, if it is running now.
std::optional<WorkerProcess> find_worker(pid_t launcher, const std::string& role, uint32_t index);

// The number after "key": in a flat JSON object; nullopt when absent.
std::optional<double> json_number(const std::string& json, const std::string& key);

}  // namespace hsring::crash
