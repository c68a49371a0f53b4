#include "tests/crash/process_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#ifndef HSRING_DEFAULT_BIN_DIR
#define HSRING_DEFAULT_BIN_DIR ""
#endif

namespace hsring::crash {

namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> split_nul(const std::string& text) {
  std::vector<std::string> parts;
  std::string current;
  for (char c : text) {
    if (c == '\0') {
      parts.push_back(current);
      current.clear();
    } else {
      current.push_back(c);
    }
  }
  if (!current.empty()) parts.push_back(current);
  return parts;
}

struct StatFields {
  char state = '?';
  pid_t ppid = 0;
  uint64_t start_time = 0;
};

// Parses /proc/<pid>/stat; the command name may hold spaces and parentheses, so fields
// are counted from the last ')'.
std::optional<StatFields> read_stat(pid_t pid) {
  const std::string text = read_file("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream in(text.substr(close + 1));
  std::vector<std::string> fields;  // fields[0] is field 3 (state)
  for (std::string f; in >> f;) fields.push_back(f);
  if (fields.size() < 20) return std::nullopt;
  StatFields stat;
  stat.state = fields[0][0];
  stat.ppid = pid_t(std::stol(fields[1]));
  stat.start_time = std::stoull(fields[19]);
  return stat;
}

}  // namespace

std::string unique_ring_name() {
  static std::atomic<int> counter{0};
  return "hsring-crash-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

std::string bin_dir() {
  if (const char* dir = std::getenv("HSRING_BIN_DIR"); dir != nullptr && *dir != '\0') return dir;
  return HSRING_DEFAULT_BIN_DIR;
}

bool segment_exists(const std::string& name) {
  struct stat st = {};
  return ::stat(("/dev/shm/" + name).c_str(), &st) == 0;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

TempDir::TempDir() {
  std::string pattern = "/tmp/hsring-crash-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr)
    throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::optional<int> wait_child(pid_t pid, Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  // A pidfd turns readable the moment the child exits: no polling latency, which matters
  // to a kill loop that reaps thousands of children.
  const int pidfd = int(::syscall(SYS_pidfd_open, pid, 0));
  auto pause = std::chrono::microseconds(50);
  std::optional<int> result;
  while (true) {
    int status = 0;
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid) {
      result = status;
      break;
    }
    if (got < 0 && errno != EINTR) break;  // not our child (any more)
    const auto now = Clock::now();
    if (now >= deadline) break;
    if (pidfd >= 0) {
      pollfd fd{pidfd, POLLIN, 0};
      const auto left = std::chrono::duration_cast<Millis>(deadline - now).count();
      ::poll(&fd, 1, int(std::min<int64_t>(left + 1, 1000)));
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(5000));
    }
  }
  if (pidfd >= 0) ::close(pidfd);
  return result;
}

std::string describe_status(int wait_status) {
  if (WIFEXITED(wait_status)) return "exit " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return "signal " + std::to_string(WTERMSIG(wait_status));
  return "status " + std::to_string(wait_status);
}

Spawned::Spawned(const std::vector<std::string>& argv, const std::string& stdout_path,
                 const std::string& stderr_path, const std::vector<std::string>& env)
    : stdout_path_(stdout_path), stderr_path_(stderr_path) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);
    const int out = ::open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || err < 0) ::_exit(125);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    ::close(out);
    ::close(err);
    for (const std::string& e : env) ::putenv(const_cast<char*>(e.c_str()));
    ::execv(args[0], args.data());
    ::_exit(127);
  }
}

Spawned::~Spawned() {
  if (pid_ > 0 && !status_) {
    ::kill(pid_, SIGKILL);
    wait_child(pid_, Millis(10000));
  }
}

std::optional<int> Spawned::wait(Millis timeout) {
  if (!status_) status_ = wait_child(pid_, timeout);
  return status_;
}

void Spawned::signal(int signo) const {
  if (!status_) ::kill(pid_, signo);
}

CommandResult run_command(const std::vector<std::string>& argv, Millis timeout) {
  TempDir dir;
  CommandResult result;
  {
    Spawned process(argv, dir.file("out"), dir.file("err"));
    const std::optional<int> status = process.wait(timeout);
    if (!status) {
      result.timed_out = true;
    } else if (WIFEXITED(*status)) {
      result.exit_code = WEXITSTATUS(*status);
    }
  }  // a timed-out process is killed here, before its output is read
  result.out = read_file(dir.file("out"));
  result.err = read_file(dir.file("err"));
  return result;
}

bool process_alive(const ProcessId& process) {
  const std::optional<StatFields> stat = read_stat(process.pid);
  if (!stat || stat->start_time != process.start_time) return false;
  if (stat->state == 'Z' || stat->state == 'X') {
    int status;
    ::waitpid(process.pid, &status, WNOHANG);  // ours when we are its (sub)reaper
    return false;
  }
  return true;
}

std::vector<WorkerProcess> find_workers(pid_t launcher) {
  std::vector<WorkerProcess> workers;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return workers;
  while (const dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    const std::optional<StatFields> stat = read_stat(pid_t(pid));
    if (!stat || stat->ppid != launcher || stat->state == 'Z' || stat->state == 'X') continue;
    // Between fork and exec the child still runs the launcher's image: skip it.
    const std::vector<std::string> args =
        split_nul(read_file("/proc/" + std::to_string(pid) + "/cmdline"));
    if (args.empty()) continue;
    std::string program = std::filesystem::path(args[0]).filename().string();
    if (program.ends_with("-gpu")) program.resize(program.size() - 4);  // the GPU builds
    WorkerProcess worker;
    if (program == "hsring-target") {
      worker.role = "target";
    } else if (program == "hsring-drafter") {
      worker.role = "drafter";
    } else {
      continue;
    }
    bool indexed = false;
    for (size_t i = 1; i + 1 < args.size(); ++i) {
      if (args[i] == "--index") {
        worker.index = uint32_t(std::stoul(args[i + 1]));
        indexed = true;
      }
    }
    if (!indexed) continue;
    worker.id = ProcessId{pid_t(pid), stat->start_time};
    workers.push_back(worker);
  }
  ::closedir(proc);
  return workers;
}

std::optional<WorkerProcess> find_worker(pid_t launcher, const std::string& role, uint32_t index) {
  for (const WorkerProcess& w : find_workers(launcher)) {
    if (w.role == role && w.index == index) return w;
  }
  return std::nullopt;
}

std::optional<double> json_number(const std::string& json, const std::string& key) {
  const std::string quoted = "\"" + key + "\"";
  size_t at = json.find(quoted);
  if (at == std::string::npos) return std::nullopt;
  at = json.find(':', at + quoted.size());
  if (at == std::string::npos) return std::nullopt;
  const char* start = json.c_str() + at + 1;
  char* end = nullptr;
  const double value = std::strtod(start, &end);
  if (end == start) return std::nullopt;
  return value;
}

}  // namespace hsring::crash
