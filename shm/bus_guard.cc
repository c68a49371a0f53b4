#include "shm/bus_guard.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace hsring {

namespace {

// Read by the signal handler: lock-free atomics only. A registration stores the name and
// end before the begin (release); the handler loads begin (acquire) first, so a non-zero
// begin comes with its name and end. Removal zeroes begin first.
struct GuardedMapping {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  char name[96] = {};
};

constexpr size_t kMaxGuarded = 16;
GuardedMapping g_mappings[kMaxGuarded];
std::mutex g_register_mutex;  // registrations among themselves; never taken by the handler
bool g_installed = false;     // GUARDED_BY(g_register_mutex)

// Async-signal-safe: write(2) of fixed pieces and a hand-made decimal.
void write_text(const char* text) {
  const ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

void write_number(uint64_t value) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = char('0' + value % 10);
    value /= 10;
  } while (value != 0);
  char text[24];
  for (int i = 0; i < n; ++i) text[i] = digits[n - 1 - i];
  text[n] = '\0';
  write_text(text);
}

void on_sigbus(int signo, siginfo_t* info, void*) {
  if (info->si_code <= 0) {  // sent by kill(), not a fault: what SIGBUS does by default
    ::signal(signo, SIG_DFL);
    ::raise(signo);
    return;
  }
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (const GuardedMapping& m : g_mappings) {
    const uintptr_t begin = m.begin.load(std::memory_order_acquire);
    if (begin == 0 || address < begin || address >= m.end.load(std::memory_order_relaxed)) continue;
    write_text("error: ring '");
    write_text(m.name);
    write_text("' lost its pages while mapped (SIGBUS at byte ");
    write_number(address - begin);
    write_text(
        "): the segment was truncated or removed under the run; exiting. Batches "
        "already consumed are accounted; restart the run on a new ring\n");
    ::_exit(kExitRingLost);
  }
  // Not ours: the default action, when the faulting access runs again on return.
  ::signal(signo, SIG_DFL);
}

}  // namespace

void guard_mapping(const void* base, size_t size, const std::string& name) {
  std::lock_guard<std::mutex> lock(g_register_mutex);
  if (!g_installed) {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, nullptr);
    g_installed = true;
  }
  for (GuardedMapping& m : g_mappings) {
    if (m.begin.load(std::memory_order_relaxed) != 0) continue;
    const size_t n = std::min(name.size(), sizeof m.name - 1);
    std::memcpy(m.name, name.data(), n);
    m.name[n] = '\0';
    m.end.store(reinterpret_cast<uintptr_t>(base) + size, std::memory_order_relaxed);
    // SYNC POINT WRITE: name and end, read by the handler after its acquire load of begin.
    m.begin.store(reinterpret_cast<uintptr_t>(base), std::memory_order_release);
    return;
  }
}

void unguard_mapping(const void* base) {
  std::lock_guard<std::mutex> lock(g_register_mutex);
  for (GuardedMapping& m : g_mappings) {
    if (m.begin.load(std::memory_order_relaxed) == reinterpret_cast<uintptr_t>(base))
      m.begin.store(0, std::memory_order_relaxed);  // the handler skips it from now on
  }
}

}  // namespace hsring
