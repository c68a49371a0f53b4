// ThreadSanitizer and liburing, for the two io_uring users (data/read_queue.cc,
// checkpoint/write_queue.cc), which include this once each.
//
// liburing maps a ring's submission and completion queues with raw system calls (it is
// built without libc), which TSan does not intercept: when a thread's ring is unmapped and
// another thread's new ring is mapped at the same address, TSan takes the new owner's
// first writes for a race with the old owner's last ones. Every ring here belongs to one
// ReadQueue or WriteQueue, which one thread owns, so a race TSan reports inside liburing's
// inline functions is that reuse: suppressed (TSan reads this at start-up). Weak, so the
// two definitions become one in a program that links both users.
#pragma once

#if defined(__SANITIZE_THREAD__)
extern "C" __attribute__((weak)) const char* __tsan_default_suppressions() {
  return "race:liburing\n";
}
#endif
