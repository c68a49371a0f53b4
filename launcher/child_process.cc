#include "launcher/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <string>

#include "common/syscheck.h"
#include "launcher/worker_logs.h"

namespace hsring {

namespace {

#ifndef P_PIDFD
constexpr int P_PIDFD = 3;  // waitid() on a pidfd, Linux 5.4; older glibc lacks the name
#endif

int pidfd_open(pid_t pid) { return int(::syscall(SYS_pidfd_open, pid, 0)); }

int pidfd_send_signal(int pidfd, int signo) {
  return int(::syscall(SYS_pidfd_send_signal, pidfd, signo, nullptr, 0));
}

}  // namespace

ChildProcess ChildProcess::spawn(const std::vector<std::string>& argv, const std::string& log_path,
                                 const std::vector<std::pair<std::string, std::string>>& env) {
  int log_fd = -1;
  if (!log_path.empty()) {
    log_fd = open_worker_log(log_path);
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const std::string launcher_pid = std::to_string(::getpid());

  // Report exec failure through a close-on-exec pipe: EOF means exec succeeded.
  int pipe_fds[2];
  syscheck(::pipe2(pipe_fds, O_CLOEXEC), Errc::kSystem, "pipe2");
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    throw sys_error(Errc::kSystem, err, "fork");
  }
  if (pid == 0) {
    ::close(pipe_fds[0]);
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);  // the launcher blocks signals for signalfd
    ::setenv("HSRING_LAUNCHER_PID", launcher_pid.c_str(), 1);
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
    if (log_fd >= 0) {  // dup2 clears close-on-exec on the copies
      ::dup2(log_fd, STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
    }
    ::execv(args[0], args.data());
    const int err = errno;
    ssize_t ignored = ::write(pipe_fds[1], &err, sizeof err);
    (void)ignored;
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  if (log_fd >= 0) ::close(log_fd);
  int exec_errno = 0;
  const ssize_t got = ::read(pipe_fds[0], &exec_errno, sizeof exec_errno);
  ::close(pipe_fds[0]);
  ChildProcess child;
  child.pid_ = pid;
  child.pidfd_ = pidfd_open(pid);
  if (child.pidfd_ < 0) {
    const int err = errno;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    child.pid_ = -1;
    throw sys_error(Errc::kSystem, err, "pidfd_open (hsring needs Linux 5.3 or newer)");
  }
  if (got == sizeof exec_errno) {
    int status;
    child.try_reap(status);
    throw sys_error(Errc::kSystem, exec_errno, fmt::format("cannot run {}", argv[0]));
  }
  return child;
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept : pid_(other.pid_), pidfd_(other.pidfd_) {
  other.pid_ = -1;
  other.pidfd_ = -1;
}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    if (pidfd_ >= 0) ::close(pidfd_);
    pid_ = other.pid_;
    pidfd_ = other.pidfd_;
    other.pid_ = -1;
    other.pidfd_ = -1;
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  if (pidfd_ >= 0) ::close(pidfd_);
}

void ChildProcess::signal(int signo) const {
  if (pidfd_ >= 0) pidfd_send_signal(pidfd_, signo);
}

void ChildProcess::signal_group(int signo) const {
  if (pid_ > 0) ::kill(-pid_, signo);
}

bool ChildProcess::group_alive() const {
  return pid_ > 0 && (::kill(-pid_, 0) == 0 || errno == EPERM);
}

bool ChildProcess::try_reap(int& wait_status) {
  if (pidfd_ < 0) return false;
  siginfo_t info{};
  if (::waitid(idtype_t(P_PIDFD), id_t(pidfd_), &info, WEXITED | WNOHANG) != 0 || info.si_pid == 0)
    return false;
  wait_status = info.si_code == CLD_EXITED ? (info.si_status & 0xff) << 8 : (info.si_status & 0x7f);
  ::close(pidfd_);
  pidfd_ = -1;
  return true;
}

std::string describe_wait_status(int wait_status) {
  if (WIFEXITED(wait_status)) return fmt::format("exited with {}", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const char* name = sigabbrev_np(WTERMSIG(wait_status));
    return name ? fmt::format("killed by SIG{}", name)
                : fmt::format("killed by SIG{}", WTERMSIG(wait_status));
  }
  return fmt::format("ended with status {}", wait_status);
}

bool killed_by_signal(int wait_status) {
  if (WIFSIGNALED(wait_status)) return true;
  return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) > 128 &&
         WEXITSTATUS(wait_status) < 128 + NSIG;
}

}  // namespace hsring
