// Waiting on 32-bit words in shared memory. The words are shared between processes, so the
// futex calls never use FUTEX_PRIVATE_FLAG; every wait has a timeout, so a dead waker
// delays nobody forever (ring-protocol.md invariant 3).
#pragma once

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>

namespace hsring {

// Sleeps while *word == expected, at most `timeout`. Returns early on a wake, a signal or
// a changed word; callers always re-check their condition.
void futex_wait(std::atomic<uint32_t>& word, uint32_t expected,
                std::chrono::nanoseconds timeout) noexcept;
void futex_wake(std::atomic<uint32_t>& word, int count) noexcept;

// A condition that processes wait for: `sequence` moves on every change that may let a
// waiter proceed; `waiters` lets the notifier skip the syscall when nobody sleeps.
//
// Thread safety: notify() and wait_for_change() pair up through seq_cst operations on
// both words (a Dekker pair): either the notifier sees the waiter's increment and wakes
// it, or the waiter's load of `sequence` sees the notifier's bump and does not sleep.
// A waiter killed while counted leaves `waiters` high, which costs syscalls, not wakes.
class SharedCondition {
 public:
  SharedCondition(std::atomic<uint32_t>& sequence, std::atomic<uint32_t>& waiters)
      : sequence_(sequence), waiters_(waiters) {}

  // Call after making the change visible (its stores happen before this seq_cst bump).
  // notify() wakes one sleeper: each change frees or fills one slot, which one waiter
  // can use (waking all of them would make the others lose the race and sleep again).
  void notify() noexcept { notify_waking(1); }
  // Wakes every sleeper: for changes that concern all of them (the ring drains).
  void notify_all() noexcept { notify_waking(INT_MAX); }

  // Waits until `ready()` holds or `timeout` passes; returns the last value of ready().
  template <class Predicate>
  // noexcept: `ready` must not throw (the ring's predicates read atomics).
  bool wait_until(Predicate ready, std::chrono::nanoseconds timeout) noexcept;

 private:
  void notify_waking(int count) noexcept;

  std::atomic<uint32_t>& sequence_;
  std::atomic<uint32_t>& waiters_;
};

// Spins this many rounds before sleeping: a batch that arrives within a few microseconds
// is taken without the futex round trip (a sleep and a wake cost ~10 us each way).
inline constexpr int kSpinRoundsBeforeSleep = 256;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

template <class Predicate>
bool SharedCondition::wait_until(Predicate ready, std::chrono::nanoseconds timeout) noexcept {
  using Clock = std::chrono::steady_clock;
  for (int round = 0; round < kSpinRoundsBeforeSleep; ++round) {
    if (ready()) return true;
    cpu_relax();
  }
  const auto deadline = Clock::now() + timeout;
  if (ready()) return true;
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  bool ok = false;
  while (true) {
    const uint32_t seen = sequence_.load(std::memory_order_seq_cst);
    if (ready()) {
      ok = true;
      break;
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    futex_wait(sequence_, seen, deadline - now);
  }
  waiters_.fetch_sub(1, std::memory_order_relaxed);
  return ok;
}

}  // namespace hsring
