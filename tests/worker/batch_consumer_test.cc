// BatchConsumer, the one consumer path of every drafter: claim with a view, torn marking,
// accounting, lost ownership, and a stopping run told apart from a timeout.
#include "worker/batch_consumer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "shm/futex.h"
#include "shm/ledger.h"
#include "shm/producer.h"
#include "shm/recovery.h"
#include "tests/worker/consumer_fixture.h"
#include "worker/synthetic_batch.h"

namespace hsring {
namespace {

using namespace std::chrono_literals;

class BatchConsumerTest : public test::ConsumerFixture {
 protected:
  BatchConsumerTest() : ConsumerFixture("batch-consumer", 99) {}

  ProcessEntry& entry() const { return ring_->process(kDrafter0); }
  uint64_t claim_waits() const {
    return entry().stages[uint32_t(Stage::kDrafterClaimWait)].count.load();
  }
  void set_run_state(RunState state) {
    ring_->header().run_state.store(uint32_t(state), std::memory_order_release);
    SharedCondition(ring_->header().ready_futex, ring_->header().ready_waiters).notify_all();
  }
};

TEST_F(BatchConsumerTest, ClaimHandsOutTheBatchWithItsViewAndTimesTheWait) {
  const uint32_t slot = produce(6);
  ClaimedBatch batch;
  ASSERT_EQ(consumer_->claim(0ms, batch), SlotStatus::kOk);
  EXPECT_EQ(batch.claim.index, slot);
  EXPECT_TRUE(word(slot).held_by(kDrafter0, drafter_->identity().epoch));
  EXPECT_EQ(batch.claim.word, word(slot));
  EXPECT_EQ(batch.view.slot(), slot);
  EXPECT_EQ(batch.view.batch_id(), 6u);
  EXPECT_EQ(batch.view.token_count(), plan_batch(6, shape_).token_count);
  EXPECT_TRUE(batch.view.in_bounds());
  EXPECT_EQ(claim_waits(), 1u);
}

TEST_F(BatchConsumerTest, TimeoutWhileRunningIsNotStopping) {
  ClaimedBatch batch;
  EXPECT_EQ(consumer_->claim(20ms, batch), SlotStatus::kTimedOut);
  EXPECT_EQ(claim_waits(), 1u) << "a timed-out attempt is timed too";
}

TEST_F(BatchConsumerTest, DrainingRingStopsTheConsumerWithoutClaiming) {
  const uint32_t slot = produce(0);
  set_run_state(RunState::kDraining);
  ClaimedBatch batch;
  EXPECT_EQ(consumer_->claim(600s, batch), SlotStatus::kStopping);
  EXPECT_EQ(word(slot).phase(), SlotPhase::kReady) << "the batch stays for the next run";
  EXPECT_EQ(claim_waits(), 0u);
}

TEST_F(BatchConsumerTest, RunThatStopsDuringTheWaitStopsTheClaim) {
  ClaimedBatch batch;
  SlotStatus status = SlotStatus::kOk;
  // Its timeout is far beyond the test's: only the stop can end the wait in time.
  std::thread waiter([&] { status = consumer_->claim(600s, batch); });
  while (ring_->header().ready_waiters.load() == 0) std::this_thread::yield();
  set_run_state(RunState::kStopped);
  waiter.join();
  EXPECT_EQ(status, SlotStatus::kStopping);
}

TEST_F(BatchConsumerTest, ReleaseMarksConsumedFreesAndAccountCounts) {
  const uint32_t slot = produce(4);
  ClaimedBatch batch;
  ASSERT_EQ(consumer_->claim(0ms, batch), SlotStatus::kOk);
  const SlotState reading = batch.claim.word;
  ASSERT_TRUE(consumer_->release(batch).ok());
  EXPECT_EQ(word(slot).phase(), SlotPhase::kFree);
  EXPECT_EQ(ring_->ledger_entry(4)->consume_word.load(), reading.word());
  EXPECT_EQ(entry().batches.load(), 0u) << "release counts nothing by itself";

  const uint32_t tokens = batch.view.token_count();
  EXPECT_EQ(consumer_->account(tokens), 0u);
  EXPECT_EQ(consumer_->account(0), 1u) << "a batch not trained on counts, without tokens";
  EXPECT_EQ(entry().batches.load(), 2u);
  EXPECT_EQ(entry().tokens.load(), tokens);
  EXPECT_EQ(entry().hs_bytes.load(),
            uint64_t(tokens) * shape_.hidden_size * shape_.num_layers * dtype_size(shape_.dtype));
  const LedgerTotals totals = ledger_totals(*ring_);
  EXPECT_EQ(totals.consumed, 1u);
  EXPECT_EQ(totals.torn, 0u);
}

TEST_F(BatchConsumerTest, TornBatchesAreMarkedInTheLedgerAndCountedPastTheLogLimit) {
  produce(2);
  ClaimedBatch batch;
  ASSERT_EQ(consumer_->claim(0ms, batch), SlotStatus::kOk);
  consumer_->mark_torn(batch, "a test's problem");
  EXPECT_NE(ring_->ledger_entry(2)->flags.load() & kLedgerTorn, 0u);
  EXPECT_EQ(entry().torn.load(), 1u);
  ASSERT_TRUE(consumer_->release(batch).ok());
  // After the release, by batch id (a GPU verdict that lands later).
  for (uint64_t id = 100; id < 100 + BatchConsumer::kTornLogLimit + 2; ++id)
    consumer_->mark_torn(id, "late verdict");
  EXPECT_EQ(consumer_->torn(), BatchConsumer::kTornLogLimit + 3);
  EXPECT_EQ(entry().torn.load(), BatchConsumer::kTornLogLimit + 3);
  EXPECT_NE(ring_->ledger_entry(100)->flags.load() & kLedgerTorn, 0u);
  EXPECT_EQ(ring_->ledger_entry(3)->flags.load() & kLedgerTorn, 0u) << "no other batch";
  EXPECT_EQ(ledger_totals(*ring_).torn, 1u + BatchConsumer::kTornLogLimit + 2);
}

TEST_F(BatchConsumerTest, OutOfBoundsHeaderGivesAViewWithNothingInIt) {
  const uint32_t slot = produce(8);
  ring_->slot(slot).token_count.store(shape_.max_tokens + 1);
  ClaimedBatch batch;
  ASSERT_EQ(consumer_->claim(0ms, batch), SlotStatus::kOk);
  EXPECT_FALSE(batch.view.in_bounds());
  EXPECT_NE(batch.view.bounds_problem().find("token count"), std::string::npos);
  EXPECT_TRUE(batch.view.tokens().empty());
  EXPECT_EQ(batch.view.rows(), 0u);
}

TEST_F(BatchConsumerTest, ReleaseAfterTheSlotWasRecoveredIsLostAndMovesNothing) {
  const uint32_t slot = produce(10);
  ClaimedBatch batch;
  ASSERT_EQ(consumer_->claim(0ms, batch), SlotStatus::kOk);
  // Another process took us for dead and gave the slot back to the drafters.
  RecoveryStats stats;
  recover_slot_as_seen(*ring_, slot, batch.claim.word, stats);
  ASSERT_EQ(stats.redelivered, 1u);
  const SlotState recovered = word(slot);
  EXPECT_EQ(recovered.phase(), SlotPhase::kReady);

  ClaimedBatch lost = batch;
  EXPECT_EQ(consumer_->release(lost).status(), SlotStatus::kLost);
  EXPECT_EQ(word(slot), recovered) << "a lost release must not free the redelivered slot";
  lost = batch;
  EXPECT_TRUE(consumer_->return_unread(lost).lost());
  EXPECT_EQ(word(slot), recovered);
}

TEST_F(BatchConsumerTest, ReturnUnreadPutsTheBatchBack) {
  const uint32_t slot = produce(12);
  ClaimedBatch batch;
  ASSERT_EQ(consumer_->claim(0ms, batch), SlotStatus::kOk);
  ASSERT_TRUE(consumer_->return_unread(batch).ok());
  EXPECT_EQ(word(slot).phase(), SlotPhase::kReady);
  EXPECT_EQ(ring_->ledger_entry(12)->consume_word.load(), 0u);
  ClaimedBatch again;
  ASSERT_EQ(consumer_->claim(0ms, again), SlotStatus::kOk);
  EXPECT_EQ(again.view.batch_id(), 12u);
}

}  // namespace
}  // namespace hsring
