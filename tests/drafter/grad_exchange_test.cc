// The gradient exchange of CPU drafter groups (drafter_proc/grad_exchange.h): members as threads
// (each with its own mapping, so TSan sees the protocol's atomics) reduce to the token-
// weighted mean with the same bits everywhere; a member behind the others, a restarted
// peer, and a SIGKILLed forked peer each end the wait with kGroupRestart in bounded time.
#include "drafter_proc/grad_exchange.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "common/error.h"

namespace hsring {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kStamp = 42;

std::string unique_name(const char* what) {
  return "hsring-gradtest-" + std::to_string(::getpid()) + "-" + what;
}

class GradExchangeTest : public ::testing::Test {
 protected:
  void SetUp() override { GradExchange::remove(name_); }
  void TearDown() override { GradExchange::remove(name_); }
  std::string name_ = unique_name(::testing::UnitTest::GetInstance()->current_test_info()->name());
};

// Every peer alive at epoch 100 + m.
PeerStatus all_alive(uint32_t member) { return {100 + member, true}; }

std::vector<float> gradient_of(uint32_t member, uint64_t step, uint64_t length) {
  std::mt19937 rng(uint32_t(member * 7919 + step));
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> g(length);
  for (float& v : g) v = normal(rng);
  return g;
}
uint64_t counted_of(uint32_t member, uint64_t step) { return 1 + (member * 37 + step * 11) % 97; }

bool deadline_keep_waiting(Clock::time_point deadline) { return Clock::now() < deadline; }

TEST_F(GradExchangeTest, ThreadsReduceToTheTokenWeightedMeanWithTheSameBits) {
  constexpr uint32_t kMembers = 3;
  constexpr uint64_t kLength = 5000;  // more than one reduction block
  constexpr uint64_t kSteps = 20;
  std::vector<std::vector<std::vector<float>>> result(kMembers,
                                                      std::vector<std::vector<float>>(kSteps));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (uint32_t m = 0; m < kMembers; ++m) {
    threads.emplace_back([&, m] {
      auto ex = GradExchange::open(name_, kMembers, m, kLength, kStamp);
      ex->join(100 + m, 1);
      const auto deadline = Clock::now() + 60s;
      for (uint64_t step = 1; step <= kSteps; ++step) {
        std::vector<float> g = gradient_of(m, step, kLength);
        const ExchangeResult r = ex->all_reduce(step, g, counted_of(m, step), all_alive,
                                                [&] { return deadline_keep_waiting(deadline); });
        if (r != ExchangeResult::kReduced) {
          ++failures;
          return;
        }
        result[m][step - 1] = std::move(g);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(failures.load(), 0);
  for (uint64_t step = 1; step <= kSteps; ++step) {
    double total = 0;
    for (uint32_t m = 0; m < kMembers; ++m) total += double(counted_of(m, step));
    std::vector<std::vector<float>> grads;
    for (uint32_t m = 0; m < kMembers; ++m) grads.push_back(gradient_of(m, step, kLength));
    for (uint64_t i = 0; i < kLength; ++i) {
      double expected = 0;
      for (uint32_t m = 0; m < kMembers; ++m)
        expected += double(grads[m][i]) * (double(counted_of(m, step)) / total);
      ASSERT_EQ(result[0][step - 1][i], float(expected)) << "step " << step << " element " << i;
    }
    for (uint32_t m = 1; m < kMembers; ++m)
      ASSERT_EQ(std::memcmp(result[m][step - 1].data(), result[0][step - 1].data(),
                            kLength * sizeof(float)),
                0)
          << "member " << m << " differs at step " << step;
  }
}

TEST_F(GradExchangeTest, AMismatchedSegmentIsRefused) {
  auto ex = GradExchange::open(name_, 2, 0, 100, kStamp);
  EXPECT_THROW(GradExchange::open(name_, 3, 1, 100, kStamp), std::runtime_error);
  EXPECT_THROW(GradExchange::open(name_, 2, 1, 101, kStamp), std::runtime_error);
  EXPECT_THROW(GradExchange::open(name_, 2, 1, 100, kStamp + 1), std::runtime_error);
  EXPECT_NO_THROW(GradExchange::open(name_, 2, 1, 100, kStamp));
}

// A member that loaded an older checkpoint than a peer leaves; the newer one waits.
// Pre-creates the segment as another user could: an empty file of `mode`, owned by `uid`
// (when that is not ours, the test must run as root to fchown it).
void plant_segment(const std::string& name, mode_t mode, uid_t uid) {
  const int fd = ::shm_open(("/" + name).c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(::fchmod(fd, mode), 0) << std::strerror(errno);
  if (uid != ::geteuid()) {
    EXPECT_EQ(::fchown(fd, uid, uid), 0) << std::strerror(errno);
  }
  ::close(fd);
}

// The segment is opened through the ring's owner and mode checks: a file others may write
// is never mapped, whoever made it.
TEST_F(GradExchangeTest, ASegmentOthersMayWriteIsRefused) {
  plant_segment(name_, 0666, ::geteuid());
  try {
    GradExchange::open(name_, 2, 0, 16, kStamp);
    FAIL() << "a segment of mode 0666 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kRing) << e.what();
    const std::string what = e.what();
    EXPECT_NE(what.find("gradient exchange '" + name_ + "'"), std::string::npos) << what;
    EXPECT_NE(what.find("mode 0666"), std::string::npos) << what;
    EXPECT_NE(what.find("/dev/shm/" + name_), std::string::npos) << "no remedy in: " << what;
  }
}

TEST_F(GradExchangeTest, ASegmentOfAnotherUserIsRefused) {
  if (::geteuid() != 0) {
    std::printf("skipped: only root can make a file owned by another uid (running as uid %u)\n",
                unsigned(::geteuid()));
    GTEST_SKIP() << "needs root to fchown a segment to another uid";
  }
  plant_segment(name_, 0600, 65534);
  try {
    GradExchange::open(name_, 2, 0, 16, kStamp);
    FAIL() << "a segment of uid 65534 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kRing) << e.what();
    const std::string what = e.what();
    EXPECT_NE(what.find("gradient exchange '" + name_ + "' belongs to uid 65534"),
              std::string::npos)
        << what;
  }
}

TEST_F(GradExchangeTest, TheMemberBehindLeaves) {
  auto a = GradExchange::open(name_, 2, 0, 64, kStamp);
  auto b = GradExchange::open(name_, 2, 1, 64, kStamp);
  a->join(100, 11);  // from checkpoint 10
  b->join(101, 21);  // from checkpoint 20
  ExchangeResult rb{};
  std::thread tb([&] {
    std::vector<float> g(64, 1);
    const auto deadline = Clock::now() + 1500ms;
    rb = b->all_reduce(21, g, 5, all_alive, [&] { return deadline_keep_waiting(deadline); });
  });
  std::vector<float> g(64, 2);
  const auto start = Clock::now();
  const ExchangeResult ra = a->all_reduce(11, g, 5, all_alive, [] { return true; });
  EXPECT_EQ(ra, ExchangeResult::kGroupRestart) << a->restart_reason();
  EXPECT_LT(Clock::now() - start, 2s);
  tb.join();
  EXPECT_EQ(rb, ExchangeResult::kStopped);  // it waited for a's successor
}

// A drain does not abandon a step that a live peer still posts (it holds its batch of
// that step), so a run's last step is not lost to when the drain began; a peer that has
// left ends the wait at once.
TEST_F(GradExchangeTest, ADrainFinishesTheStepOfLivePeers) {
  auto a = GradExchange::open(name_, 2, 0, 64, kStamp);
  auto b = GradExchange::open(name_, 2, 1, 64, kStamp);
  a->join(100, 1);
  b->join(101, 1);
  std::thread tb([&] {
    std::this_thread::sleep_for(300ms);  // a step still being computed when the drain began
    std::vector<float> g(64, 1);
    EXPECT_EQ(b->all_reduce(1, g, 1, all_alive, [] { return false; }), ExchangeResult::kReduced);
  });
  std::vector<float> g(64, 3);
  EXPECT_EQ(a->all_reduce(1, g, 1, all_alive, [] { return false; }), ExchangeResult::kReduced);
  tb.join();
  EXPECT_FLOAT_EQ(g[0], 2.0f);
  // Step 2: b has left without posting.
  const PeerWatch b_gone = [](uint32_t m) { return PeerStatus{100 + m, m == 0}; };
  const auto start = Clock::now();
  EXPECT_EQ(a->all_reduce(2, g, 1, b_gone, [] { return false; }), ExchangeResult::kStopped);
  EXPECT_LT(Clock::now() - start, 1s);
}

// A member that posted a step and exited (the run's last step, then its drain) still
// counts for that step: its buffer is complete. Its death breaks the group only at a step
// it did not post.
TEST_F(GradExchangeTest, APeerThatPostedAndLeftStillCountsForThatStep) {
  auto a = GradExchange::open(name_, 2, 0, 64, kStamp);
  auto b = GradExchange::open(name_, 2, 1, 64, kStamp);
  a->join(100, 1);
  b->join(101, 1);
  std::vector<float> gb(64, 1);
  std::thread tb([&] {
    EXPECT_EQ(b->all_reduce(1, gb, 1, all_alive, [] { return true; }), ExchangeResult::kReduced);
  });
  std::vector<float> g(64, 3);
  ASSERT_EQ(a->all_reduce(1, g, 1, all_alive, [] { return true; }), ExchangeResult::kReduced);
  tb.join();
  // b posts step 2 and leaves before a looks.
  std::fill(gb.begin(), gb.end(), 5.0f);
  std::thread late([&] { (void)b->all_reduce(2, gb, 1, all_alive, [] { return false; }); });
  std::this_thread::sleep_for(100ms);
  const PeerWatch b_gone = [](uint32_t m) { return PeerStatus{100 + m, m == 0}; };
  std::fill(g.begin(), g.end(), 1.0f);
  EXPECT_EQ(a->all_reduce(2, g, 1, b_gone, [] { return true; }), ExchangeResult::kReduced);
  EXPECT_FLOAT_EQ(g[0], 3.0f);
  late.join();
  // Step 3, which b never posts: its death now breaks the group.
  EXPECT_EQ(a->all_reduce(3, g, 1, b_gone, [] { return true; }), ExchangeResult::kGroupRestart);
}

// After an exchange, a peer's new incarnation (another epoch) breaks the group.
TEST_F(GradExchangeTest, ARestartedPeerBreaksTheGroup) {
  std::atomic<uint32_t> epoch_b{101};
  PeerWatch watch = [&](uint32_t m) {
    return m == 0 ? PeerStatus{100, true} : PeerStatus{epoch_b.load(), true};
  };
  auto a = GradExchange::open(name_, 2, 0, 64, kStamp);
  auto b = GradExchange::open(name_, 2, 1, 64, kStamp);
  a->join(100, 1);
  b->join(101, 1);
  std::thread tb([&] {
    std::vector<float> g(64, 1);
    EXPECT_EQ(b->all_reduce(1, g, 3, watch, [] { return true; }), ExchangeResult::kReduced);
  });
  std::vector<float> g(64, 2);
  ASSERT_EQ(a->all_reduce(1, g, 1, watch, [] { return true; }), ExchangeResult::kReduced);
  tb.join();
  EXPECT_FLOAT_EQ(g[0], 1.25f);
  // b restarts from checkpoint 0 and posts its step 1 again.
  epoch_b = 102;
  auto b2 = GradExchange::open(name_, 2, 1, 64, kStamp);
  b2->join(102, 1);
  ExchangeResult rb2{};
  std::thread tb2([&] {
    std::vector<float> g2(64, 1);
    const auto deadline = Clock::now() + 1500ms;
    rb2 = b2->all_reduce(1, g2, 3, watch, [&] { return deadline_keep_waiting(deadline); });
  });
  const ExchangeResult ra = a->all_reduce(2, g, 1, watch, [] { return true; });
  EXPECT_EQ(ra, ExchangeResult::kGroupRestart);
  EXPECT_NE(a->restart_reason().find("drafter 1"), std::string::npos) << a->restart_reason();
  tb2.join();
  // b2 and a started from the same step: b2 reduces with a's post of step 1 (a gradient
  // at the same state, so the replicas stay consistent); at its next step the group of
  // b2 and the old a breaks, since a leaves.
  EXPECT_EQ(rb2, ExchangeResult::kReduced);
}

// A forked member SIGKILLed after an exchange: the survivor leaves within a few slices.
TEST_F(GradExchangeTest, ASigkilledPeerMakesTheSurvivorLeave) {
  constexpr uint64_t kLength = 1000;
  auto a = GradExchange::open(name_, 2, 0, kLength, kStamp);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto b = GradExchange::open(name_, 2, 1, kLength, kStamp);
    b->join(101, 1);
    std::vector<float> g(kLength, 1);
    const ExchangeResult r = b->all_reduce(1, g, 1, all_alive, [] { return true; });
    if (r != ExchangeResult::kReduced) ::_exit(1);
    ::pause();  // never posts step 2
    ::_exit(0);
  }
  bool reaped = false;
  PeerWatch watch = [&](uint32_t m) {
    if (m == 0) return PeerStatus{100, true};
    int status;
    if (!reaped && ::waitpid(child, &status, WNOHANG) == child) reaped = true;
    return PeerStatus{101, !reaped};
  };
  a->join(100, 1);
  std::vector<float> g(kLength, 3);
  ASSERT_EQ(a->all_reduce(1, g, 1, watch, [] { return true; }), ExchangeResult::kReduced);
  EXPECT_FLOAT_EQ(g[0], 2.0f);
  std::thread killer([&] {
    std::this_thread::sleep_for(100ms);
    ::kill(child, SIGKILL);
  });
  const auto start = Clock::now();
  const auto deadline = start + 10s;
  const ExchangeResult r =
      a->all_reduce(2, g, 1, watch, [&] { return deadline_keep_waiting(deadline); });
  const double waited_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  killer.join();
  if (!reaped) ::waitpid(child, nullptr, 0);
  EXPECT_EQ(r, ExchangeResult::kGroupRestart);
  EXPECT_NE(a->restart_reason().find("died"), std::string::npos) << a->restart_reason();
  EXPECT_LT(waited_ms, 1000) << "the survivor noticed the death late";
}

}  // namespace
}  // namespace hsring
