// The launcher's restart policy, driven with a synthetic clock: exponential backoff from
// 100 ms to a 10 s cap, reset after a healthy run or progress, and crash-loop detection in
// a window.
#include "launcher/restart_policy.h"

#include <gtest/gtest.h>

#include <vector>

namespace hsring {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kS = 1'000 * kMs;

// Starts at `now`, crashes `run` later; returns whether a restart is allowed.
bool run_and_crash(RestartPolicy& policy, uint64_t& now, uint64_t run) {
  policy.on_start(now);
  now += run;
  return policy.on_crash(now, /*made_progress=*/false);
}

TEST(RestartPolicyTest, BackoffDoublesFrom100msAndCapsAt10s) {
  RestartLimits limits;
  limits.max_crashes = 1000;  // this test is about the delay, not the crash loop
  RestartPolicy policy(limits);
  uint64_t now = 1000 * kS;
  const std::vector<uint64_t> expected = {100 * kMs,  200 * kMs,  400 * kMs, 800 * kMs, 1600 * kMs,
                                          3200 * kMs, 6400 * kMs, 10 * kS,   10 * kS,   10 * kS};
  for (uint64_t delay : expected) {
    ASSERT_TRUE(run_and_crash(policy, now, 1 * kS));
    EXPECT_EQ(policy.restart_delay_ns(), delay);
    now += policy.restart_delay_ns();
  }
}

TEST(RestartPolicyTest, HealthyRunResetsTheBackoff) {
  RestartLimits limits;
  limits.max_crashes = 1000;
  RestartPolicy policy(limits);
  uint64_t now = 0;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(run_and_crash(policy, now, 1 * kS));
  ASSERT_EQ(policy.restart_delay_ns(), 1600 * kMs);

  // Just short of healthy: the backoff keeps growing.
  ASSERT_TRUE(run_and_crash(policy, now, 30 * kS - 1));
  EXPECT_EQ(policy.restart_delay_ns(), 3200 * kMs);
  // Exactly the healthy time: back to the initial delay.
  ASSERT_TRUE(run_and_crash(policy, now, 30 * kS));
  EXPECT_EQ(policy.restart_delay_ns(), 100 * kMs);
  ASSERT_TRUE(run_and_crash(policy, now, 1 * kS));
  EXPECT_EQ(policy.restart_delay_ns(), 200 * kMs) << "and doubles again from there";
}

TEST(RestartPolicyTest, MaxCrashesWithinTheWindowIsACrashLoop) {
  RestartPolicy policy{RestartLimits{}};  // 5 crashes within 60 s
  uint64_t now = 5 * kS;
  for (uint32_t i = 1; i < 5; ++i) {
    EXPECT_TRUE(run_and_crash(policy, now, 2 * kS)) << "crash " << i;
    EXPECT_EQ(policy.crashes_in_window(), i);
  }
  EXPECT_FALSE(run_and_crash(policy, now, 2 * kS)) << "the fifth crash within 60 s stops it";
  EXPECT_EQ(policy.crashes_in_window(), 5u);
}

TEST(RestartPolicyTest, CrashesOlderThanTheWindowAgeOut) {
  RestartPolicy policy{RestartLimits{}};
  // Four crashes at 1, 11, 21 and 31 s (a slow loop), then one at 75 s: the first two are
  // more than 60 s old by then, so three remain and the worker is restarted.
  for (uint64_t t : {1ull, 11ull, 21ull, 31ull}) {
    policy.on_start((t - 1) * kS);
    ASSERT_TRUE(policy.on_crash(t * kS, false));
  }
  policy.on_start(70 * kS);
  EXPECT_TRUE(policy.on_crash(75 * kS, false));
  EXPECT_EQ(policy.crashes_in_window(), 3u);
  // Two more inside the window reach five again.
  policy.on_start(76 * kS);
  EXPECT_TRUE(policy.on_crash(77 * kS, false));
  policy.on_start(78 * kS);
  EXPECT_FALSE(policy.on_crash(79 * kS, false));
}

TEST(RestartPolicyTest, CrashesSpacedWiderThanTheWindowNeverLoop) {
  RestartPolicy policy{RestartLimits{}};
  uint64_t now = 0;
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(run_and_crash(policy, now, 61 * kS)) << "crash " << i;
    EXPECT_EQ(policy.crashes_in_window(), 1u);
    EXPECT_EQ(policy.restart_delay_ns(), 100 * kMs) << "each run was healthy";
  }
}

TEST(RestartPolicyTest, CustomLimitsAreHonoured) {
  RestartLimits limits;
  limits.initial_delay_ns = 1 * kS;
  limits.max_delay_ns = 3 * kS;
  limits.max_crashes = 2;
  limits.window_ns = 10 * kS;
  RestartPolicy policy(limits);
  uint64_t now = 0;
  ASSERT_TRUE(run_and_crash(policy, now, 1 * kS));
  EXPECT_EQ(policy.restart_delay_ns(), 1 * kS);
  EXPECT_FALSE(run_and_crash(policy, now, 1 * kS));
  EXPECT_EQ(policy.restart_delay_ns(), 2 * kS);
}

// A worker SIGKILLed every 2 s while it works (issue 33's chaos soak: every restart waited
// the 10 s cap, and the run crash-looped): it restarts after 100 ms every time, however
// many times it is killed, and is never a crash loop.
TEST(RestartPolicyTest, AWorkerKilledWhileItWorksRestartsFastAndIsNoCrashLoop) {
  RestartPolicy policy{RestartLimits{}};  // 5 crashes within 60 s
  uint64_t now = 5 * kS;
  for (int i = 0; i < 100; ++i) {
    policy.on_start(now);
    now += 2 * kS;
    ASSERT_TRUE(policy.on_crash(now, /*made_progress=*/true)) << "kill " << i;
    EXPECT_EQ(policy.restart_delay_ns(), 100 * kMs) << "kill " << i;
    EXPECT_EQ(policy.crashes_in_window(), 1u);
    now += policy.restart_delay_ns();
  }
}

// Crashes with no work between them are a loop, whatever came before: after a crash that
// followed progress, four more without progress reach the limit of five and back off.
TEST(RestartPolicyTest, CrashesWithoutProgressAfterProgressStillMakeALoop) {
  RestartPolicy policy{RestartLimits{}};
  uint64_t now = 5 * kS;
  ASSERT_TRUE(run_and_crash(policy, now, 1 * kS));
  ASSERT_TRUE(run_and_crash(policy, now, 1 * kS));
  EXPECT_EQ(policy.restart_delay_ns(), 200 * kMs);
  policy.on_start(now);
  now += 1 * kS;
  ASSERT_TRUE(policy.on_crash(now, /*made_progress=*/true));
  EXPECT_EQ(policy.restart_delay_ns(), 100 * kMs);
  EXPECT_EQ(policy.crashes_in_window(), 1u) << "the crashes before the work are forgotten";
  const std::vector<uint64_t> backoff = {200 * kMs, 400 * kMs, 800 * kMs};
  for (uint64_t delay : backoff) {
    ASSERT_TRUE(run_and_crash(policy, now, 1 * kS));
    EXPECT_EQ(policy.restart_delay_ns(), delay);
  }
  EXPECT_FALSE(run_and_crash(policy, now, 1 * kS)) << "five crashes, the last four without work";
}

}  // namespace
}  // namespace hsring
