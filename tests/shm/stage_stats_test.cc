// Stage statistics from histogram differences (shm/stage_stats.h): exact percentiles on
// constructed histograms, properties on random ones (monotone in q, inside the bucket of
// the true sample, never above the highest bucket's bound), the profile line, and the
// worker session's profile log driven from heartbeats on several threads.
#include "shm/stage_stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "shm/stage_timer.h"
#include "shm/worker_session.h"
#include "tests/shm/ring_test_util.h"
#include "worker/session_duties.h"

namespace hsring {
namespace {

using namespace std::chrono_literals;

StageHistogram with_buckets(std::initializer_list<std::pair<uint32_t, uint64_t>> buckets) {
  StageHistogram h;
  for (const auto& [bucket, count] : buckets) {
    h.buckets[bucket] = count;
    h.count += count;
  }
  return h;
}

uint32_t bucket_of(uint64_t ns) {
  return std::min<uint32_t>(StageCounter::kBuckets - 1, ns ? std::bit_width(ns) - 1 : 0);
}

TEST(StageStatsTest, BucketBoundsArePowersOfTwo) {
  EXPECT_EQ(bucket_lower_ns(0), 0);
  EXPECT_EQ(bucket_upper_ns(0), 2);
  EXPECT_EQ(bucket_lower_ns(1), 2);
  EXPECT_EQ(bucket_upper_ns(1), 4);
  EXPECT_EQ(bucket_lower_ns(10), 1024);
  EXPECT_EQ(bucket_upper_ns(10), 2048);
}

TEST(StageStatsTest, OneBucketInterpolatesInsideIt) {
  const StageHistogram h = with_buckets({{10, 100}});  // 100 samples in [1024, 2048)
  EXPECT_DOUBLE_EQ(histogram_quantile_ns(h, 0.5), 1024 + 1024 * 0.5);
  EXPECT_DOUBLE_EQ(histogram_quantile_ns(h, 0.99), 1024 + 1024 * 0.99);
  EXPECT_DOUBLE_EQ(histogram_quantile_ns(h, 1.0), 2048);
  EXPECT_DOUBLE_EQ(histogram_quantile_ns(h, 0.0), 1024);
}

TEST(StageStatsTest, TwoBucketsSplitAtTheRank) {
  // 50 in [8, 16), 50 in [32, 64): rank 50 ends the first bucket, rank 99 is 49/50 of
  // the way through the second.
  const StageHistogram h = with_buckets({{3, 50}, {5, 50}});
  EXPECT_DOUBLE_EQ(histogram_quantile_ns(h, 0.5), 16);
  EXPECT_DOUBLE_EQ(histogram_quantile_ns(h, 0.99), 32 + 32 * (49.0 / 50.0));
  // 1 slow sample in 1000: p99 stays in the fast bucket, p99.95 reaches the slow one.
  const StageHistogram tail = with_buckets({{20, 999}, {30, 1}});
  EXPECT_LT(histogram_quantile_ns(tail, 0.99), bucket_upper_ns(20));
  EXPECT_GE(histogram_quantile_ns(tail, 0.9995), bucket_lower_ns(30));
}

TEST(StageStatsTest, EmptyHistogramGivesZeros) {
  const StageStats s = stage_stats(StageHistogram{});
  EXPECT_EQ(s.count, 0u);
  EXPECT_EQ(s.mean_ns, 0);
  EXPECT_EQ(s.p50_ns, 0);
  EXPECT_EQ(s.p99_ns, 0);
  EXPECT_EQ(histogram_quantile_ns(StageHistogram{}, 0.5), 0);
}

TEST(StageStatsTest, DiffIsWhatHappenedBetweenReadings) {
  auto entry = std::make_unique<ProcessEntry>();
  for (int i = 0; i < 100; ++i) record_stage(*entry, Stage::kTargetForward, 100);  // bucket 6
  const StageHistograms before = read_stages(*entry);
  for (int i = 0; i < 10; ++i) record_stage(*entry, Stage::kTargetForward, 5000);  // bucket 12
  record_stage(*entry, Stage::kDrafterStep, 3);
  const StageHistograms after = read_stages(*entry);

  const StageHistogram forward = histogram_diff(before[uint32_t(Stage::kTargetForward)],
                                                after[uint32_t(Stage::kTargetForward)]);
  EXPECT_EQ(forward.count, 10u);
  EXPECT_EQ(forward.total_ns, 50000u);
  EXPECT_EQ(forward.buckets[6], 0u);
  EXPECT_EQ(forward.buckets[12], 10u);
  const StageStats s = stage_stats(forward);
  EXPECT_EQ(s.count, 10u);
  EXPECT_DOUBLE_EQ(s.mean_ns, 5000);
  EXPECT_DOUBLE_EQ(s.p50_ns, 4096 + 4096 * 0.5);  // the interval only: no 100 ns samples
  EXPECT_DOUBLE_EQ(s.p99_ns, 4096 + 4096 * 0.99);

  // A counter that went down (another ring's reading) counts as nothing, not as 2^64.
  const StageHistogram backwards = histogram_diff(after[0], before[0]);
  EXPECT_EQ(stage_stats(backwards).count, 0u);
}

TEST(StageStatsTest, PercentilesAreMonotoneBoundedAndInTheTrueSamplesBucket) {
  std::mt19937_64 rng(20240611);
  for (int round = 0; round < 500; ++round) {
    // Durations spread over many octaves, as stage timings are.
    std::vector<uint64_t> samples(1 + rng() % 2000);
    const int octaves = 1 + int(rng() % 30);
    for (uint64_t& ns : samples)
      ns = uint64_t(std::ldexp(1.0 + double(rng() % 1000) / 1000, int(rng() % octaves)));
    StageHistogram h;
    for (uint64_t ns : samples) {
      ++h.buckets[bucket_of(ns)];
      ++h.count;
      h.total_ns += ns;
    }
    std::sort(samples.begin(), samples.end());
    const uint32_t highest = bucket_of(samples.back());
    const uint32_t lowest = bucket_of(samples.front());

    const StageStats s = stage_stats(h);
    ASSERT_EQ(s.count, samples.size());
    EXPECT_LE(s.p50_ns, s.p99_ns);
    EXPECT_LE(s.p99_ns, bucket_upper_ns(highest));
    EXPECT_GE(s.p50_ns, bucket_lower_ns(lowest));

    double previous = 0;
    for (double q : {0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0}) {
      const double estimate = histogram_quantile_ns(h, q);
      EXPECT_GE(estimate, previous) << "q " << q;
      previous = estimate;
      if (q == 0) continue;
      // The sample of rank ceil(q*n) lies in the bucket the estimate comes from.
      const size_t rank = size_t(std::ceil(q * double(samples.size())));
      const uint32_t b = bucket_of(samples[std::max<size_t>(rank, 1) - 1]);
      EXPECT_GE(estimate, bucket_lower_ns(b)) << "q " << q;
      EXPECT_LE(estimate, bucket_upper_ns(b)) << "q " << q;
    }
  }
}

TEST(StageStatsTest, ProfileLineNamesTheStagesTimedInTheInterval) {
  StageHistograms before{}, after{};
  after[uint32_t(Stage::kTargetForward)] = with_buckets({{20, 4}});  // [1.05 ms, 2.1 ms)
  after[uint32_t(Stage::kTargetForward)].total_ns = 4 * 1'500'000;
  after[uint32_t(Stage::kDrafterClaimWait)] = with_buckets({{10, 2}});
  after[uint32_t(Stage::kDrafterClaimWait)].total_ns = 2 * 2000;
  const std::string line = format_stage_profile(before, after, 5.0);
  EXPECT_EQ(line.rfind("profile 5.0 s: target.forward count=4 mean_ms=1.500 p50_ms=1.573 ", 0), 0u)
      << line;
  EXPECT_NE(line.find("; drafter.claim_wait count=2 mean_ms=0.002"), std::string::npos) << line;
  EXPECT_EQ(line.find("target.copy"), std::string::npos) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(format_stage_profile(after, after, 1.0), "profile 1.0 s: no stage timed");
}

// heartbeat() from several threads of one worker, with stages recorded beside it: one
// thread per period writes a line; run under TSan this checks the election and the base.
TEST(StageStatsTest, SessionProfileLogsOnePeriodAtATimeFromAnyThread) {
  test::ScopedRingName name("profile");
  auto creator = Ring::create(name.str(), test::tiny_shape());
  auto session = WorkerSession::start(Ring::attach(name.str()), 0, Role::kTarget, 0ms);
  // Samples of an earlier epoch are not this incarnation's: the first line leaves them out.
  for (int i = 0; i < 1000; ++i) record_stage(session->entry(), Stage::kTargetCopy, 10);

  std::mutex mutex;
  std::vector<std::string> lines;
  attach_session_duties(*session, 20'000'000, [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mutex);
    lines.push_back(line);
  });
  std::vector<std::thread> threads;
  const auto until = std::chrono::steady_clock::now() + 300ms;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      while (std::chrono::steady_clock::now() < until) {
        record_stage(session->entry(), t % 2 ? Stage::kTargetForward : Stage::kTargetPublishWait,
                     1000 + t);
        session->heartbeat();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  std::lock_guard<std::mutex> lock(mutex);
  // 300 ms in 20 ms periods: about 15 lines; never more than one per period.
  EXPECT_GE(lines.size(), 3u);
  EXPECT_LE(lines.size(), 16u);
  // Each line holds what the threads recorded in its period (a thread may miss a period
  // on a busy machine), never the earlier epoch's samples.
  bool forward = false, publish_wait = false;
  for (const std::string& line : lines) {
    EXPECT_EQ(line.rfind("profile ", 0), 0u) << line;
    EXPECT_NE(line.find(" s: target."), std::string::npos) << line;
    EXPECT_EQ(line.find("target.copy"), std::string::npos) << line;
    forward |= line.find("target.forward count=") != std::string::npos;
    publish_wait |= line.find("target.publish_wait count=") != std::string::npos;
  }
  EXPECT_TRUE(forward && publish_wait);
}

}  // namespace
}  // namespace hsring
