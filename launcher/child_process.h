// A worker process started by the launcher, watched through a pidfd: its exit is seen the
// moment it happens (poll), and signals go to exactly this process even if its pid is
// reused after it is reaped.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace hsring {

class ChildProcess {
 public:
  // fork + exec of `argv` (argv[0] is the program path). The child gets its own process
  // group (the launcher decides how workers stop), SIGTERM when the launcher dies, and
  // HSRING_LAUNCHER_PID. Throws Error (class system) when it cannot be started.
  // With `log_path`, the child's stdout and stderr append to that file (open_worker_log:
  // Error(kUsage) when it is a symlink or another user's file).
  // `env` is added to the child's environment (after HSRING_LAUNCHER_PID).
  static ChildProcess spawn(const std::vector<std::string>& argv, const std::string& log_path = "",
                            const std::vector<std::pair<std::string, std::string>>& env = {});

  ChildProcess() = default;
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ~ChildProcess();

  bool running() const { return pidfd_ >= 0; }
  pid_t pid() const { return pid_; }
  int pidfd() const { return pidfd_; }  // readable once the child has exited

  void signal(int signo) const;  // through the pidfd: never hits a reused pid
  // Signals the child's whole process group (it leads its own): what a shell command
  // started. Before the child is reaped its pid (the group's id) cannot be reused (an
  // exited but unreaped leader holds it); after, only while group_alive() just said so:
  // the kernel keeps a group's id in use while any member lives.
  void signal_group(int signo) const;
  // True while any process of the child's group lives (the child itself included until
  // reaped): a shell may exit at SIGTERM before the program it started (dash does not
  // exec a lone `-c` command), and the drain waits for that program too.
  bool group_alive() const;
  // Reaps the child if it has exited; returns true and fills `status` (waitid's si_code /
  // si_status as a wait status) when it did.
  bool try_reap(int& wait_status);

 private:
  pid_t pid_ = -1;
  int pidfd_ = -1;
};

// "exited with 3", "killed by SIGKILL"
std::string describe_wait_status(int wait_status);

// True for a death by a signal: the process's own, or its command's as a shell that stayed
// between reports it (exit 128 + N, N a signal number).
bool killed_by_signal(int wait_status);

}  // namespace hsring
