// The compute pool (common/thread_pool.h) behind parallel_for (common/parallel.h): each
// chunk once, the same bits for any thread count, threads kept across regions, nested and
// concurrent regions, exceptions, a forked child. Built and run under ThreadSanitizer too
// (the tsan preset), which checks that a chunk's writes reach the caller.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/parallel.h"
#include "common/thread_pool.h"

namespace hsring {
namespace {

TEST(ParallelTest, CoversTheRangeOnceForAnyThreadCount) {
  for (uint32_t threads : {1u, 2u, 3u, 8u}) {
    for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(100)}) {
      std::vector<std::atomic<int>> hits(n);
      parallel_for(n, threads, 2, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << threads << " " << n;
    }
  }
  EXPECT_GE(resolve_threads(0), 1u);
  EXPECT_EQ(resolve_threads(3), 3u);
}

// Plain (not atomic) writes of each chunk's own range, read by the caller after the
// region: the pool must publish them (TSan reports a race if it does not).
std::vector<float> chunked_values(size_t n, uint32_t threads) {
  std::vector<float> out(n);
  parallel_for(n, threads, 16, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      float x = float(i) * 0.37f;
      for (int k = 0; k < 20; ++k) x = std::sin(x) * 1.7f + 0.1f;
      out[i] = x;
    }
  });
  return out;
}

TEST(ParallelTest, SameBitsForAnyThreadCount) {
  const std::vector<float> one = chunked_values(1000, 1);
  for (uint32_t threads : {2u, 3u, 5u, 16u}) EXPECT_EQ(chunked_values(1000, threads), one);
}

// Regions reuse the pool's threads: a thread-per-region fork-join would show a new thread
// (a fresh thread_local) in every region.
thread_local bool t_counted = false;

TEST(ThreadPoolTest, RegionsReuseThePoolsThreads) {
  std::atomic<int> distinct{0};
  const auto body = [&](size_t, size_t) {
    if (!t_counted) {
      t_counted = true;
      distinct.fetch_add(1);
    }
  };
  parallel_for(3, 3, 1, body);
  const size_t pool_threads = ThreadPool::shared().threads();
  EXPECT_GE(pool_threads, 2u);
  for (int region = 0; region < 200; ++region) parallel_for(3, 3, 1, body);
  EXPECT_EQ(ThreadPool::shared().threads(), pool_threads);
  // The caller and at most every pool thread, however many regions ran.
  EXPECT_LE(distinct.load(), int(pool_threads) + 1);
}

TEST(ThreadPoolTest, ANestedRegionRunsOnItsCallersThread) {
  std::vector<int> inner_elsewhere(8, 0);
  std::vector<int> inner_hits(8 * 64, 0);
  parallel_for(8, 8, 1, [&](size_t b, size_t e) {
    for (size_t outer = b; outer < e; ++outer) {
      const std::thread::id self = std::this_thread::get_id();
      parallel_for(64, 8, 1, [&](size_t ib, size_t ie) {
        if (std::this_thread::get_id() != self) inner_elsewhere[outer] = 1;
        for (size_t i = ib; i < ie; ++i) ++inner_hits[outer * 64 + i];
      });
    }
  });
  EXPECT_EQ(inner_elsewhere, std::vector<int>(8, 0));
  EXPECT_EQ(inner_hits, std::vector<int>(8 * 64, 1));
}

TEST(ThreadPoolTest, ConcurrentCallersShareThePool) {
  constexpr int kCallers = 4, kRegions = 100;
  std::vector<std::vector<uint64_t>> sums(kCallers, std::vector<uint64_t>(kRegions, 0));
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c)
    callers.emplace_back([&sums, c] {
      for (int r = 0; r < kRegions; ++r) {
        std::vector<uint64_t> part(3, 0);
        parallel_for(300, 3, 1, [&](size_t b, size_t e) {
          uint64_t s = 0;
          for (size_t i = b; i < e; ++i) s += i * uint64_t(c + 1);
          part[b / 100] = s;  // chunks of 300 over 3 are [0,100), [100,200), [200,300)
        });
        sums[size_t(c)][size_t(r)] = part[0] + part[1] + part[2];
      }
    });
  for (std::thread& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c)
    EXPECT_EQ(sums[size_t(c)], std::vector<uint64_t>(kRegions, 299 * 300 / 2 * uint64_t(c + 1)));
}

TEST(ThreadPoolTest, AThrowingChunkLetsTheOthersEndThenRethrows) {
  std::vector<std::atomic<int>> ran(4);
  EXPECT_THROW(parallel_for(4, 4, 1,
                            [&](size_t b, size_t) {
                              ran[b].fetch_add(1);
                              if (b == 1) throw std::runtime_error("chunk 1");
                            }),
               std::runtime_error);
  for (const auto& r : ran) EXPECT_EQ(r.load(), 1);
  // The pool still works after a throw.
  EXPECT_EQ(chunked_values(100, 4), chunked_values(100, 1));
}

TEST(ThreadPoolTest, AForkedChildGrowsAPoolOfItsOwn) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "TSan does not follow a multi-threaded process's child that starts threads";
#endif
  parallel_for(4, 4, 1, [](size_t, size_t) {});  // the parent's pool has threads
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Waiting on the parent's threads (which the child lacks), or notifying condition
    // variables that still count them as waiters, would hang, not exit.
    const bool ok =
        chunked_values(1000, 4) == chunked_values(1000, 1) && ThreadPool::shared().threads() >= 1;
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace hsring
