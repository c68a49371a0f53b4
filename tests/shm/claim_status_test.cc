// The claims' and transitions' typed results: a timeout, a stopping run and a lost slot
// are told apart (shm/slot_result.h).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "shm/consumer.h"
#include "shm/futex.h"
#include "shm/producer.h"
#include "shm/worker_session.h"
#include "tests/shm/ring_test_util.h"
#include "worker/synthetic_batch.h"

namespace hsring {
namespace {

using namespace std::chrono_literals;

class ClaimStatusTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kTarget0 = 0, kDrafter0 = 2;

  void SetUp() override { ring_ = Ring::create(name_.str(), shape_); }

  std::unique_ptr<WorkerSession> start(uint32_t index) {
    const Role role = index < shape_.num_targets ? Role::kTarget : Role::kDrafter;
    return WorkerSession::start(Ring::attach(name_.str()), index, role, 0ms);
  }
  void produce(WorkerSession& target, uint64_t batch_id) {
    ClaimResult claim = claim_free_slot(target.ring(), target.identity(), 0, 0ms);
    ASSERT_EQ(claim.status(), SlotStatus::kOk);
    ASSERT_EQ(bind_batch(target.ring(), *claim, batch_id).status(), SlotStatus::kOk);
    const BatchPlan plan = plan_batch(batch_id, shape_);
    fill_synthetic_batch(target.ring(), claim->index, plan);
    ASSERT_EQ(publish(target.ring(), *claim,
                      BatchInfo{batch_id, plan.token_count, plan.num_docs, plan.length_bucket})
                  .status(),
              SlotStatus::kOk);
  }
  void set_run_state(RunState state) {
    ring_->header().run_state.store(uint32_t(state), std::memory_order_release);
    SharedCondition(ring_->header().ready_futex, ring_->header().ready_waiters).notify_all();
    SharedCondition(ring_->header().free_futex, ring_->header().free_waiters).notify_all();
  }

  RingShape shape_ = test::tiny_shape();
  test::ScopedRingName name_{"claim-status"};
  std::unique_ptr<Ring> ring_;
  uint64_t rng_ = 5;
};

TEST_F(ClaimStatusTest, ConsumerTimesOutWhileTheRunGoesOn) {
  auto drafter = start(kDrafter0);
  const ClaimResult claim = claim_ready_slot(drafter->ring(), drafter->identity(), 1, 20ms, rng_);
  EXPECT_FALSE(claim);
  EXPECT_EQ(claim.status(), SlotStatus::kTimedOut);
  // Draining is not stopping: a batch may still be published by a target finishing it.
  set_run_state(RunState::kDraining);
  EXPECT_EQ(claim_ready_slot(drafter->ring(), drafter->identity(), 1, 0ms, rng_).status(),
            SlotStatus::kTimedOut);
}

TEST_F(ClaimStatusTest, ConsumerGetsStoppingOnceTheRunStopped) {
  auto drafter = start(kDrafter0);
  set_run_state(RunState::kStopped);
  // Far beyond the ctest timeout: a claim that waited it out would fail the test.
  EXPECT_EQ(claim_ready_slot(drafter->ring(), drafter->identity(), 1, 600s, rng_).status(),
            SlotStatus::kStopping);
}

TEST_F(ClaimStatusTest, SleepingConsumerWakesWithStoppingWhenTheRunStops) {
  auto drafter = start(kDrafter0);
  ClaimResult claim;
  std::thread consumer(
      [&] { claim = claim_ready_slot(drafter->ring(), drafter->identity(), 1, 600s, rng_); });
  while (ring_->header().ready_waiters.load() == 0) std::this_thread::yield();
  set_run_state(RunState::kStopped);
  consumer.join();
  EXPECT_EQ(claim.status(), SlotStatus::kStopping);
}

TEST_F(ClaimStatusTest, ReadyBatchesAreStillHandedOutWhileDrainingOrStopped) {
  auto target = start(kTarget0);
  auto drafter = start(kDrafter0);
  produce(*target, 0);
  produce(*target, 2);
  set_run_state(RunState::kDraining);
  EXPECT_EQ(claim_ready_slot(drafter->ring(), drafter->identity(), 1, 0ms, rng_).status(),
            SlotStatus::kOk);
  set_run_state(RunState::kStopped);
  EXPECT_EQ(claim_ready_slot(drafter->ring(), drafter->identity(), 1, 0ms, rng_).status(),
            SlotStatus::kOk);
}

TEST_F(ClaimStatusTest, ProducerTimesOutOnAFullRingAndStopsWhenItDrains) {
  auto target = start(kTarget0);
  for (uint32_t i = 0; i < shape_.slot_count; ++i)
    ASSERT_TRUE(claim_free_slot(target->ring(), target->identity(), i, 0ms));
  EXPECT_EQ(claim_free_slot(target->ring(), target->identity(), 0, 20ms).status(),
            SlotStatus::kTimedOut);
  ClaimResult claim;
  std::thread producer(
      [&] { claim = claim_free_slot(target->ring(), target->identity(), 0, 600s); });
  while (ring_->header().free_waiters.load() == 0) std::this_thread::yield();
  set_run_state(RunState::kDraining);
  producer.join();
  EXPECT_EQ(claim.status(), SlotStatus::kStopping);
}

TEST_F(ClaimStatusTest, TransitionsOfAClaimThatMovedOnAreLost) {
  auto target = start(kTarget0);
  ClaimResult claim = claim_free_slot(target->ring(), target->identity(), 0, 0ms);
  ASSERT_TRUE(claim);
  const SlotClaim stale_claimed = *claim;
  ASSERT_TRUE(bind_batch(target->ring(), *claim, 4).ok());
  SlotClaim stale = stale_claimed;
  EXPECT_EQ(bind_batch(target->ring(), stale, 4).status(), SlotStatus::kLost);
  stale = stale_claimed;
  EXPECT_EQ(unclaim(target->ring(), stale).status(), SlotStatus::kLost);
  // Each transition from a word in the wrong phase is lost too, and moves nothing.
  stale = stale_claimed;
  EXPECT_TRUE(publish(target->ring(), stale, BatchInfo{4, 1, 1, 0}).lost());
  EXPECT_TRUE(return_unread(target->ring(), stale).lost());
  EXPECT_EQ(SlotState(ring_->slot(claim->index).state.load()), claim->word);
}

TEST(SlotStatusNames, EveryStatusHasAName) {
  EXPECT_STREQ(to_string(SlotStatus::kOk), "ok");
  EXPECT_STREQ(to_string(SlotStatus::kTimedOut), "timed out");
  EXPECT_STREQ(to_string(SlotStatus::kStopping), "stopping");
  EXPECT_STREQ(to_string(SlotStatus::kLost), "lost");
}

}  // namespace
}  // namespace hsring
