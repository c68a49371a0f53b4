// The FREE/READY claim hints (shm/slot_hints.h): every transition moves its slot's bit, a
// dead actor's half-done update costs at most a retry, and recovery repairs the bitmaps.
#include <gtest/gtest.h>

#include <chrono>
#include <map>

#include "shm/consumer.h"
#include "shm/producer.h"
#include "shm/recovery.h"
#include "shm/slot_hints.h"
#include "shm/slot_transition.h"
#include "tests/shm/ring_test_util.h"

namespace hsring {
namespace {

using namespace std::chrono_literals;

class SlotHintsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shape_.slot_count = 70;  // two hint words, the second partial
    ring_ = Ring::create(name_.str(), shape_);
  }
  bool hinted(SlotPhase phase, uint32_t index) {
    return (hint_bits(*ring_, phase)->words[index / 64].load() >> (index % 64)) & 1;
  }
  // Every bit equals "the slot's word is in that phase".
  void expect_consistent() {
    for (uint32_t i = 0; i < ring_->slot_count(); ++i) {
      const SlotPhase phase = SlotState(ring_->slot(i).state.load()).phase();
      EXPECT_EQ(hinted(SlotPhase::kFree, i), phase == SlotPhase::kFree) << "slot " << i;
      EXPECT_EQ(hinted(SlotPhase::kReady, i), phase == SlotPhase::kReady) << "slot " << i;
    }
  }
  SlotClaim produce(uint32_t hint, uint64_t batch_id) {
    ClaimResult claim = claim_free_slot(*ring_, producer_, hint, 0ms);
    EXPECT_EQ(claim.status(), SlotStatus::kOk);
    SlotClaim held = *claim;
    EXPECT_EQ(bind_batch(*ring_, held, batch_id).status(), SlotStatus::kOk);
    EXPECT_EQ(publish(*ring_, held, BatchInfo{batch_id, 1, 1, 0}).status(), SlotStatus::kOk);
    return held;
  }

  RingShape shape_ = test::tiny_shape();
  test::ScopedRingName name_{"slot-hints"};
  std::unique_ptr<Ring> ring_;
  Identity producer_{0, 1}, consumer_{2, 1};
  uint64_t rng_ = 11;
};

TEST_F(SlotHintsTest, CreatedRingHintsEverySlotFreeAndNoBitPastTheRing) {
  expect_consistent();
  // Bits 70..127 of the second word name no slot.
  EXPECT_EQ(ring_->header().free_hints.words[1].load(), (uint64_t(1) << 6) - 1);
}

TEST_F(SlotHintsTest, EveryTransitionMovesItsBit) {
  ClaimResult claim = claim_free_slot(*ring_, producer_, 66, 0ms);
  ASSERT_TRUE(claim);
  EXPECT_EQ(claim->index, 66u);  // the hint is where the search starts
  expect_consistent();
  SlotClaim held = *claim;
  ASSERT_TRUE(bind_batch(*ring_, held, 7));
  expect_consistent();
  ASSERT_TRUE(publish(*ring_, held, BatchInfo{7, 1, 1, 0}));
  expect_consistent();
  EXPECT_TRUE(hinted(SlotPhase::kReady, 66));
  ClaimResult read = claim_ready_slot(*ring_, consumer_, 1, 0ms, rng_);
  ASSERT_TRUE(read);
  EXPECT_EQ(read->index, 66u);
  expect_consistent();
  SlotClaim reading = *read;
  ASSERT_TRUE(return_unread(*ring_, reading));
  expect_consistent();
  read = claim_ready_slot(*ring_, consumer_, 1, 0ms, rng_);
  ASSERT_TRUE(read);
  reading = *read;
  ASSERT_TRUE(release_consumed(*ring_, reading));
  expect_consistent();
  EXPECT_TRUE(hinted(SlotPhase::kFree, 66));
}

TEST_F(SlotHintsTest, FreeSearchWrapsAroundFromTheHint) {
  // Claim every slot from 69 down to 1 by hand, leaving slots 0 FREE: a search from 69
  // must wrap to it.
  for (uint32_t i = 1; i < ring_->slot_count(); ++i) {
    const SlotState seen(ring_->slot(i).state.load());
    ASSERT_TRUE(transition_slot(*ring_, i, seen, seen.next(SlotPhase::kClaimed, 0, 1)));
  }
  ClaimResult claim = claim_free_slot(*ring_, producer_, 69, 0ms);
  ASSERT_TRUE(claim);
  EXPECT_EQ(claim->index, 0u);
  EXPECT_EQ(claim_free_slot(*ring_, producer_, 69, 0ms).status(), SlotStatus::kTimedOut);
  expect_consistent();
}

TEST_F(SlotHintsTest, DeathAfterThePublishCasBeforeItsHintLosesNothing) {
  // The publisher's CAS to READY landed, its fetch_or did not (SIGKILL between them).
  SlotClaim held = produce(3, 1);
  hint_bits(*ring_, SlotPhase::kReady)->words[0].fetch_and(~(uint64_t(1) << held.index));
  // The fast path sees no hint; the claim's full pass still finds the slot and restores it.
  ClaimResult read = claim_ready_slot(*ring_, consumer_, 1, 0ms, rng_);
  ASSERT_TRUE(read);
  EXPECT_EQ(read->index, held.index);
  expect_consistent();
}

TEST_F(SlotHintsTest, ProducersFullPassRestoresTheFreeHintsItMeets) {
  // Dead actors left every FREE bit unset: the fast path finds nothing; the full pass
  // claims the first FREE slot from the hint and restores the bits of all the others, as
  // the consumers' pass does for READY.
  for (uint32_t w = 0; w < kHintWords; ++w) hint_bits(*ring_, SlotPhase::kFree)->words[w].store(0);
  ClaimResult claim = claim_free_slot(*ring_, producer_, 5, 0ms);
  ASSERT_TRUE(claim);
  EXPECT_EQ(claim->index, 5u);
  expect_consistent();
}

TEST_F(SlotHintsTest, DeathAfterAClaimCasBeforeItsHintCostsOneRetry) {
  // A consumer's CAS to READING landed, its fetch_and did not: the READY bit is stale.
  SlotClaim first = produce(0, 1);
  SlotClaim second = produce(1, 2);
  const SlotState seen(ring_->slot(first.index).state.load());
  uint64_t expected = seen.word();
  ASSERT_TRUE(
      ring_->slot(first.index)
          .state.compare_exchange_strong(
              expected, seen.next(SlotPhase::kReading, consumer_.index, consumer_.epoch).word()));
  ASSERT_TRUE(hinted(SlotPhase::kReady, first.index));
  // Claims get the only READY slot; one that draws the stale bit drops it and draws again.
  ClaimResult read = claim_ready_slot(*ring_, Identity{3, 1}, 1, 0ms, rng_);
  ASSERT_TRUE(read);
  EXPECT_EQ(read->index, second.index);
  EXPECT_EQ(claim_ready_slot(*ring_, Identity{3, 1}, 1, 0ms, rng_).status(), SlotStatus::kTimedOut);
  EXPECT_FALSE(hinted(SlotPhase::kReady, first.index));
}

TEST_F(SlotHintsTest, RepairAfterSimulatedDeathsRestoresEveryBit) {
  produce(10, 1);
  produce(20, 2);
  // Scramble both bitmaps as a sequence of half-done updates could leave them.
  hint_bits(*ring_, SlotPhase::kFree)->words[0].store(0x5555'0000'0000'0400ull);
  hint_bits(*ring_, SlotPhase::kReady)->words[0].store(uint64_t(1) << 33);
  hint_bits(*ring_, SlotPhase::kReady)->words[1].store(1);
  EXPECT_GT(repair_hints(*ring_), 0u);
  expect_consistent();
  EXPECT_EQ(repair_hints(*ring_), 0u);  // idempotent
  // recover_dead_owners runs the same repair.
  hint_bits(*ring_, SlotPhase::kFree)->words[1].store(0);
  const RecoveryStats stats = recover_dead_owners(*ring_);
  EXPECT_EQ(stats.hints, 6u);  // slots 64..69
  expect_consistent();
}

TEST_F(SlotHintsTest, StaleClearNeverErasesALiveHint) {
  // drop_stale_hint on a slot that is READY again by the time it re-checks keeps the bit.
  SlotClaim held = produce(5, 1);
  drop_stale_hint(*ring_, held.index, SlotPhase::kReady);
  EXPECT_TRUE(hinted(SlotPhase::kReady, held.index));
  drop_stale_hint(*ring_, held.index, SlotPhase::kFree);
  EXPECT_FALSE(hinted(SlotPhase::kFree, held.index));
}

TEST_F(SlotHintsTest, ConsumersStillDrawUniformlyAmongReadySlots) {
  // 4 READY slots, hs_min_ready 4: each is drawn about a quarter of the time.
  for (uint64_t b = 0; b < 4; ++b) produce(uint32_t(b * 17), b);
  std::map<uint32_t, int> drawn;
  constexpr int kDraws = 4000;
  for (int d = 0; d < kDraws; ++d) {
    ClaimResult read = claim_ready_slot(*ring_, consumer_, 4, 0ms, rng_);
    ASSERT_TRUE(read);
    ++drawn[read->index];
    SlotClaim reading = *read;
    ASSERT_TRUE(return_unread(*ring_, reading));
  }
  ASSERT_EQ(drawn.size(), 4u);
  for (const auto& [index, count] : drawn) {
    EXPECT_GT(count, kDraws / 4 - 200) << index;
    EXPECT_LT(count, kDraws / 4 + 200) << index;
  }
  expect_consistent();
}

}  // namespace
}  // namespace hsring
