// Ordered claims (`hsring run --deterministic`): drafters take batch ids in order whatever
// order the targets publish them in, targets stay inside the window above the oldest
// unconsumed id, and a ring of few slots with several targets and drafters never stalls.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "shm/consumer.h"
#include "shm/ledger.h"
#include "shm/ordered_claims.h"
#include "shm/producer.h"
#include "shm/worker_session.h"
#include "tests/shm/ring_test_util.h"
#include "worker/synthetic_batch.h"

namespace hsring {
namespace {

using namespace std::chrono_literals;
using test::ScopedRingName;

RingShape ordered_shape(uint32_t slots, uint32_t targets, uint32_t drafters, uint64_t batches) {
  RingShape s = test::tiny_shape();
  s.slot_count = slots;
  s.num_targets = targets;
  s.num_drafters = drafters;
  s.hs_min_ready = 1;
  s.batch_limit = batches;
  s.ordered_claims = 1;
  return s;
}

class OrderedClaimsTest : public ::testing::Test {
 protected:
  void create(const RingShape& shape) {
    shape_ = shape;
    ring_ = Ring::create(name_.str(), shape_);
  }
  std::unique_ptr<WorkerSession> start(uint32_t index) {
    const Role role = index < shape_.num_targets ? Role::kTarget : Role::kDrafter;
    return WorkerSession::start(Ring::attach(name_.str()), index, role, 0ms);
  }
  // Writes synthetic batch `batch_id` into a FREE slot and publishes it.
  static void produce(WorkerSession& target, uint64_t batch_id) {
    Ring& ring = target.ring();
    auto claim = claim_free_slot(ring, target.identity(), uint32_t(batch_id), 1s);
    ASSERT_TRUE(claim.ok());
    ASSERT_TRUE(bind_batch(ring, *claim, batch_id).ok());
    const BatchPlan plan = plan_batch(batch_id, ring.shape());
    fill_synthetic_batch(ring, claim->index, plan);
    ASSERT_TRUE(
        publish(ring, *claim,
                BatchInfo{plan.batch_id, plan.token_count, plan.num_docs, plan.length_bucket})
            .ok());
  }

  RingShape shape_;
  ScopedRingName name_{"ordered"};
  std::unique_ptr<Ring> ring_;
};

TEST_F(OrderedClaimsTest, TakesTheAskedIdWhateverThePublishOrder) {
  create(ordered_shape(8, 2, 1, 100));
  auto target = start(0);
  auto drafter = start(2);
  for (uint64_t id : {3, 1, 2}) produce(*target, id);
  // Batch 0 is not there: no other is taken in its place.
  EXPECT_EQ(claim_batch_in_order(drafter->ring(), drafter->identity(), 0, 0ms).status(),
            SlotStatus::kTimedOut);
  produce(*target, 0);
  for (uint64_t id = 0; id < 4; ++id) {
    auto claim = claim_batch_in_order(drafter->ring(), drafter->identity(), id, 0ms);
    ASSERT_TRUE(claim.ok()) << id;
    EXPECT_EQ(ring_->slot(claim->index).batch_id.load(), id);
    ASSERT_TRUE(release_consumed(drafter->ring(), *claim).ok());
    EXPECT_EQ(ring_->header().ordered_floor.load(), id + 1);
  }
}

TEST_F(OrderedClaimsTest, WhileTheRunDrainsTheSmallestReadyIdIsTaken) {
  create(ordered_shape(8, 2, 1, 100));
  auto target = start(0);
  auto drafter = start(2);
  for (uint64_t id : {6, 4, 5}) produce(*target, id);
  ring_->header().run_state.store(uint32_t(RunState::kDraining));
  auto claim = claim_batch_in_order(drafter->ring(), drafter->identity(), 2, 0ms);
  ASSERT_TRUE(claim.ok());
  EXPECT_EQ(ring_->slot(claim->index).batch_id.load(), 4u);
}

TEST_F(OrderedClaimsTest, TargetsStayInsideTheWindowAboveTheOldestUnconsumedId) {
  create(ordered_shape(4, 2, 1, 100));
  EXPECT_TRUE(inside_ordered_window(*ring_, 3));
  EXPECT_FALSE(inside_ordered_window(*ring_, 4));
  EXPECT_FALSE(wait_for_ordered_window(*ring_, 4, 1ms));
  // Consumed out of order: the floor moves only once the oldest is consumed.
  const SlotState word = SlotState().next(SlotPhase::kReading, 2, 1);
  ledger_mark_consumed(*ring_, 1, word);
  EXPECT_EQ(advance_ordered_floor(*ring_), 0u);
  EXPECT_FALSE(inside_ordered_window(*ring_, 4));
  // A consumer that died between its ledger mark and its advance: the next look advances.
  ledger_mark_consumed(*ring_, 0, word);
  EXPECT_TRUE(inside_ordered_window(*ring_, 5));
  EXPECT_EQ(ring_->header().ordered_floor.load(), 2u);
  EXPECT_EQ(next_unconsumed(*ring_, 0, 1), 2u);
  EXPECT_EQ(next_unconsumed(*ring_, 1, 2), 3u);
  // Without ordered claims there is no window.
  RingShape random = ordered_shape(4, 2, 1, 100);
  random.ordered_claims = 0;
  ScopedRingName other("random");
  auto unordered = Ring::create(other.str(), random);
  EXPECT_TRUE(inside_ordered_window(*unordered, 1000));
}

TEST_F(OrderedClaimsTest, ShapeRefusesOrderedClaimsWithoutABatchLimit) {
  RingShape s = ordered_shape(4, 2, 1, 0);
  EXPECT_NE(validate_shape(s).find("batch limit"), std::string::npos) << validate_shape(s);
  s.batch_limit = 10;
  s.ordered_claims = 2;
  EXPECT_FALSE(validate_shape(s).empty());
}

// Three targets and two drafters on four slots, each on its own thread, with the targets
// at uneven speeds: every drafter sees exactly its ids r, r + 2, ... in order, and the run
// finishes (the window keeps the slots from filling with ids nobody waits for yet).
TEST_F(OrderedClaimsTest, FewSlotsManyWorkersEveryDrafterSeesItsIdsInOrder) {
  const uint64_t batches = test::kUnderTsan ? 120 : 600;
  create(ordered_shape(4, 3, 2, batches));
  std::vector<std::thread> threads;
  std::atomic<bool> failed{false};
  for (uint32_t t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      auto target = start(t);
      Ring& ring = target->ring();
      for (uint64_t id = t; id < batches && !failed; id += 3) {
        while (!wait_for_ordered_window(ring, id, 10ms))
          if (failed) return;
        auto claim = claim_free_slot(ring, target->identity(), t, 5s);
        if (!claim.ok() || !bind_batch(ring, *claim, id).ok()) {
          failed = true;
          return;
        }
        const BatchPlan plan = plan_batch(id, ring.shape());
        fill_synthetic_batch(ring, claim->index, plan);
        if (t == 0) std::this_thread::sleep_for(200us);  // one slow target
        if (!publish(ring, *claim, {plan.batch_id, plan.token_count, plan.num_docs, 0}).ok())
          failed = true;
      }
    });
  }
  std::vector<std::vector<uint64_t>> seen(2);
  for (uint32_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto drafter = start(3 + r);
      Ring& ring = drafter->ring();
      for (uint64_t id = next_unconsumed(ring, r, 2); id < batches && !failed;
           id = next_unconsumed(ring, id + 2, 2)) {
        auto claim = claim_batch_in_order(ring, drafter->identity(), id, 5s);
        if (!claim.ok()) {
          failed = true;
          return;
        }
        seen[r].push_back(ring.slot(claim->index).batch_id.load(std::memory_order_relaxed));
        if (!release_consumed(ring, *claim).ok()) failed = true;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  ASSERT_FALSE(failed) << "a claim timed out: the ordered ring stalled";
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_EQ(seen[r].size(), batches / 2) << r;
    for (size_t i = 0; i < seen[r].size(); ++i) ASSERT_EQ(seen[r][i], r + 2 * i) << r;
  }
  EXPECT_EQ(ring_->header().ordered_floor.load(), batches);
  EXPECT_EQ(ledger_totals(*ring_, batches).consumed, batches);
}

}  // namespace
}  // namespace hsring
