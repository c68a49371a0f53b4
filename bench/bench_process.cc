#include "bench/bench_process.h"

#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <new>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "common/clock.h"
#include "shm/futex.h"

namespace hsring::bench {

SharedMapping::SharedMapping(size_t bytes) : size_(bytes) {
  data_ = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (data_ == MAP_FAILED) {
    throw std::system_error(errno, std::generic_category(),
                            "mmap of " + std::to_string(bytes) + " shared bytes");
  }
}

SharedMapping::~SharedMapping() { ::munmap(data_, size_); }

SwitchCounter::SwitchCounter() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  voluntary_ = usage.ru_nvcsw;
  involuntary_ = usage.ru_nivcsw;
}

void SwitchCounter::record(ChildReport& report) const {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  report.voluntary_switches.store(uint64_t(usage.ru_nvcsw - voluntary_), std::memory_order_relaxed);
  report.involuntary_switches.store(uint64_t(usage.ru_nivcsw - involuntary_),
                                    std::memory_order_relaxed);
}

void PollBackoff::pause() {
  if (polls_++ == 0) spin_until_ns_ = monotonic_ns() + kSpinWindowNs;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
  // Reading the clock costs about as much as a poll of one word: look every 16th time.
  if (!yielding_ && polls_ % 16 == 0) yielding_ = monotonic_ns() >= spin_until_ns_;
  if (yielding_) ::sched_yield();
}

void Child::wait_for_start() {
  // Release: our setup is done before the parent, which loads `arrived` with acquire,
  // starts the clock.
  arrived_.fetch_add(1, std::memory_order_release);
  while (go_.load(std::memory_order_acquire) == 0) {
    futex_wait(go_, 0, std::chrono::milliseconds(100));
  }
}

// Lives in the group's shared mapping. Zero is the initial value of every field.
struct ChildGroup::StartLine {
  alignas(64) std::atomic<uint32_t> arrived;
  alignas(64) std::atomic<uint32_t> go;  // futex word: 1 once the parent starts everyone
  ChildReport reports[kMaxChildren];
};

namespace {

[[noreturn]] void run_child(const std::function<void(Child&)>& body, Child child, pid_t parent) {
  // The parent's cleanup handler would unlink objects that other children still use.
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGHUP, SIG_DFL);
  std::signal(SIGPIPE, SIG_DFL);
  // A parent killed outright (SIGKILL) must not leave children spinning on a core.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);
  int code = 0;
  try {
    body(child);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ring_bench: child %u: %s\n", child.rank(), e.what());
    code = 1;
  }
  std::fflush(nullptr);
  // _exit, not exit: the parent's objects copied by fork (transports that own the named
  // segments) must not run their destructors here.
  ::_exit(code);
}

std::string describe_exit(uint32_t rank, int status) {
  if (WIFEXITED(status)) {
    return "benchmark child " + std::to_string(rank) + " exited with status " +
           std::to_string(WEXITSTATUS(status));
  }
  if (WIFSIGNALED(status)) {
    return "benchmark child " + std::to_string(rank) + " was killed by signal " +
           std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  }
  return "benchmark child " + std::to_string(rank) + " ended with status " + std::to_string(status);
}

}  // namespace

ChildGroup::ChildGroup() : shared_(sizeof(StartLine)) { line_ = new (shared_.data()) StartLine(); }

ChildGroup::~ChildGroup() { kill_running(); }

void ChildGroup::spawn(const std::function<void(Child&)>& body) {
  if (spawned_ >= kMaxChildren) {
    throw std::runtime_error("more than " + std::to_string(kMaxChildren) + " benchmark children");
  }
  const uint32_t rank = spawned_;
  Child child(rank, line_->arrived, line_->go, line_->reports[rank]);
  const pid_t parent = ::getpid();
  std::fflush(nullptr);  // or the child would print our buffered output a second time
  const pid_t pid = ::fork();
  if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");
  if (pid == 0) run_child(body, child, parent);
  running_.push_back({pid, rank});
  ++spawned_;
}

void ChildGroup::reap_exited() {
  for (size_t i = 0; i < running_.size();) {
    int status = 0;
    const pid_t pid = ::waitpid(running_[i].pid, &status, WNOHANG);
    if (pid == 0) {
      ++i;
      continue;
    }
    if (pid < 0) throw std::system_error(errno, std::generic_category(), "waitpid");
    const uint32_t rank = running_[i].rank;
    running_.erase(running_.begin() + ptrdiff_t(i));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      throw std::runtime_error(describe_exit(rank, status));
  }
}

uint64_t ChildGroup::start(std::chrono::nanoseconds limit) {
  const uint64_t deadline = monotonic_ns() + uint64_t(limit.count());
  while (line_->arrived.load(std::memory_order_acquire) < spawned_) {
    reap_exited();  // a child that failed in setup never arrives
    if (monotonic_ns() >= deadline) {
      throw std::runtime_error("benchmark children not set up within " +
                               std::to_string(limit.count() / 1'000'000) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const uint64_t now = monotonic_ns();
  line_->go.store(1, std::memory_order_release);
  futex_wake(line_->go, INT_MAX);
  return now;
}

void ChildGroup::wait_all(std::chrono::nanoseconds limit) {
  const uint64_t deadline = monotonic_ns() + uint64_t(limit.count());
  while (true) {
    reap_exited();
    if (running_.empty()) return;
    if (monotonic_ns() >= deadline) {
      throw std::runtime_error(std::to_string(running_.size()) +
                               " benchmark children still running after " +
                               std::to_string(limit.count() / 1'000'000) + " ms: stalled");
    }
    // Results come from the children's own clocks; this only bounds how long we look.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void ChildGroup::kill_running() {
  for (const Running& child : running_) {
    ::kill(child.pid, SIGKILL);
    ::waitpid(child.pid, nullptr, 0);
  }
  running_.clear();
}

const ChildReport& ChildGroup::report(uint32_t rank) const { return line_->reports[rank]; }

uint64_t ChildGroup::latest_end_ns() const {
  uint64_t latest = 0;
  for (uint32_t i = 0; i < spawned_; ++i) {
    latest = std::max(latest, line_->reports[i].end_ns.load(std::memory_order_relaxed));
  }
  return latest;
}

// --- Named shared memory -------------------------------------------------------------------

namespace {

constexpr const char* kNamePrefix = "hsring-bench-";
constexpr int kMaxNames = 256;
constexpr size_t kMaxPath = 96;

// Fixed storage, so that the signal handler reads it without allocating.
char g_paths[kMaxNames][kMaxPath];
std::atomic<int> g_path_count{0};

void unlink_registered(int signal) {
  // unlink(2) is async-signal-safe; a name whose object was already removed just fails.
  const int count = g_path_count.load(std::memory_order_acquire);
  for (int i = 0; i < count; ++i) ::unlink(g_paths[i]);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

}  // namespace

std::string register_shm_name(const std::string& tag) {
  std::string name = kNamePrefix + std::to_string(::getpid()) + "-" + tag;
  const std::string path = "/dev/shm/" + name;
  const int index = g_path_count.load(std::memory_order_relaxed);
  if (index >= kMaxNames || path.size() >= kMaxPath) {
    throw std::runtime_error("cannot register shared-memory name '" + name + "'");
  }
  std::memcpy(g_paths[index], path.c_str(), path.size() + 1);
  // Release: the handler, which loads the count with acquire, sees the complete path.
  g_path_count.store(index + 1, std::memory_order_release);
  return name;
}

void install_cleanup_handlers() {
  struct sigaction action {};
  action.sa_handler = unlink_registered;
  sigemptyset(&action.sa_mask);
  for (int signal : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::sigaction(signal, &action, nullptr);
}

int remove_stale_shm() {
  namespace fs = std::filesystem;
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/dev/shm", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kNamePrefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + std::strlen(kNamePrefix), nullptr, 10);
    if (pid <= 0 || pid == ::getpid()) continue;
    // Only a pid that no longer exists: a live one may be a concurrent benchmark.
    if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;
    if (fs::remove(entry.path(), ec)) ++removed;
  }
  return removed;
}

}  // namespace hsring::bench
