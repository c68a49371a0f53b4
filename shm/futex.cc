#include "shm/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>

namespace hsring {

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected,
                std::chrono::nanoseconds timeout) noexcept {
  if (timeout.count() <= 0) return;
  timespec ts;
  ts.tv_sec = time_t(timeout.count() / 1'000'000'000);
  ts.tv_nsec = long(timeout.count() % 1'000'000'000);
  // EAGAIN (word changed), EINTR and ETIMEDOUT all mean "re-check": nothing to report.
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>& word, int count) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, count, nullptr, nullptr, 0);
}

void SharedCondition::notify_waking(int count) noexcept {
  sequence_.fetch_add(1, std::memory_order_seq_cst);
  if (waiters_.load(std::memory_order_seq_cst) != 0) futex_wake(sequence_, count);
}

}  // namespace hsring
