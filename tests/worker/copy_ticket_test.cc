// Early publish's transitions on the CPU (shm/copy_ticket.h): a slot published with its copy
// pending is read only once the copy is known complete (the producer's settled ticket, or
// its event polled complete while it lives); a producer that dies first gets the slot back
// unread, as WRITING for its next incarnation, which adopts and writes it again.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "shm/consumer.h"
#include "shm/copy_ticket.h"
#include "shm/ledger.h"
#include "shm/producer.h"
#include "shm/recovery.h"
#include "tests/worker/consumer_fixture.h"
#include "worker/batch_consumer.h"
#include "worker/synthetic_batch.h"

namespace hsring {
namespace {

using namespace std::chrono_literals;

class CopyTicketTest : public test::ConsumerFixture {
 protected:
  CopyTicketTest() : ConsumerFixture("copy-ticket", 7) {}

  // Publishes synthetic batch `batch_id` with its copy pending (early): returns the slot.
  uint32_t publish_early(uint64_t batch_id) {
    CopyEvent event;
    event.handle[0] = 0x5a;
    return produce(batch_id, &event, &ticket_);
  }
  uint32_t returned() const { return ring_->target_progress(kTarget0).returned.load(); }

  uint64_t ticket_ = 0;
};

TEST_F(CopyTicketTest, PublishAfterTheCopyStoresASettledTicket) {
  ClaimResult claim = claim_free_slot(target_->ring(), target_->identity(), 0, 0ms);
  ASSERT_TRUE(claim);
  ASSERT_TRUE(bind_batch(target_->ring(), *claim, 4).ok());
  uint64_t ticket = 1;
  ASSERT_TRUE(publish(target_->ring(), *claim, BatchInfo{4, 1, 1, 0}, nullptr, &ticket).ok());
  EXPECT_FALSE(copy_pending(ticket));
  ClaimedBatch batch;
  ASSERT_EQ(consumer_->claim(0ms, batch), SlotStatus::kOk);
  PendingCopy pending;
  EXPECT_FALSE(read_pending_copy(*ring_, batch.claim, pending));
}

TEST_F(CopyTicketTest, PendingSlotIsHandedOutOnlyOnceTheProducerSettles) {
  const uint32_t slot = publish_early(3);
  EXPECT_TRUE(copy_pending(ticket_));
  EXPECT_EQ(ring_->slot(slot).producer_epoch.load(), target_->identity().epoch);
  EXPECT_EQ(ring_->slot(slot).copy_event[0], 0x5a);
  // No poller (a CPU consumer), producer alive: the claim times out and puts the slot back.
  ClaimedBatch batch;
  EXPECT_EQ(consumer_->claim(30ms, batch), SlotStatus::kTimedOut);
  EXPECT_EQ(word(slot).phase(), SlotPhase::kReady);
  EXPECT_EQ(consumer_->given_back(), 0u);
  // Settled 50 ms into a claim: the claim returns after it, with the slot.
  std::thread settler([&] {
    std::this_thread::sleep_for(50ms);
    EXPECT_TRUE(settle_copy(target_->ring(), slot, ticket_));
  });
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(consumer_->claim(5s, batch), SlotStatus::kOk);
  settler.join();
  EXPECT_GE(std::chrono::steady_clock::now() - start, 45ms);
  EXPECT_EQ(batch.claim.index, slot);
  EXPECT_EQ(batch.view.batch_id(), 3u);
  EXPECT_EQ(consumer_->copies_awaited(), 2u);  // the timed-out claim and this one
  // A ticket settles once: a second settle (or one of an older ticket) changes nothing.
  EXPECT_FALSE(settle_copy(target_->ring(), slot, ticket_));
}

TEST_F(CopyTicketTest, EventPolledCompleteFromALiveProducerIsRead) {
  const uint32_t slot = publish_early(5);
  int polls = 0;
  consumer_->set_copy_poller([&](const PendingCopy& pending) {
    EXPECT_EQ(pending.producer, kTarget0);
    EXPECT_EQ(pending.event.handle[0], 0x5a);
    return ++polls >= 3;  // "not ready" twice, then complete
  });
  ClaimedBatch batch;
  ASSERT_EQ(consumer_->claim(5s, batch), SlotStatus::kOk);
  EXPECT_EQ(polls, 3);
  EXPECT_EQ(batch.claim.index, slot);
  EXPECT_TRUE(consumer_->release(batch).ok());
  EXPECT_EQ(word(slot).phase(), SlotPhase::kFree);
}

TEST_F(CopyTicketTest, ProducerDeadMidCopyGetsTheSlotBackUnreadForItsSuccessor) {
  const uint32_t slot = publish_early(6);
  const uint32_t dead_epoch = target_->identity().epoch;
  target_.reset();  // SIGKILL: the liveness lock goes with the process
  // Even an event that says "complete" is not trusted from a dead exporter.
  consumer_->set_copy_poller([](const PendingCopy&) { return true; });
  ClaimedBatch batch;
  EXPECT_EQ(consumer_->claim(50ms, batch), SlotStatus::kTimedOut);
  EXPECT_EQ(consumer_->given_back(), 1u);
  EXPECT_EQ(returned(), 1u);
  const SlotState back = word(slot);
  EXPECT_EQ(back.phase(), SlotPhase::kWriting);
  EXPECT_EQ(back.owner(), kTarget0);
  EXPECT_EQ(back.epoch(), dead_epoch & SlotState::kEpochMask);
  EXPECT_EQ(ring_->slot(slot).batch_id.load(), 6u);
  // Recovery leaves it for the successor (as a WRITING slot of a dead target) ...
  EXPECT_EQ(recover_dead_owners(*ring_).orphaned, 1u);
  EXPECT_EQ(word(slot).phase(), SlotPhase::kWriting);
  // ... which adopts it with its batch id and writes it again.
  target_ = start(kTarget0);
  std::vector<SlotClaim> adopted = adopt_previous_writes(target_->ring(), target_->identity());
  ASSERT_EQ(adopted.size(), 1u);
  EXPECT_EQ(adopted[0].index, slot);
  const BatchPlan plan = plan_batch(6, shape_);
  fill_synthetic_batch(target_->ring(), slot, plan);
  ASSERT_TRUE(publish(target_->ring(), adopted[0],
                      BatchInfo{6, plan.token_count, plan.num_docs, plan.length_bucket})
                  .ok());
  ASSERT_EQ(consumer_->claim(1s, batch), SlotStatus::kOk);
  EXPECT_EQ(batch.view.batch_id(), 6u);
  ASSERT_TRUE(consumer_->release(batch).ok());
  EXPECT_EQ(ring_->ledger_entry(6)->duplicates.load(), 0u);
}

TEST_F(CopyTicketTest, ProducerThatSettledAndExitedIsNotTakenForDeadMidCopy) {
  const uint32_t slot = publish_early(8);
  ASSERT_TRUE(settle_copy(target_->ring(), slot, ticket_));
  target_.reset();
  consumer_->set_copy_poller([](const PendingCopy&) { return false; });
  ClaimedBatch batch;
  ASSERT_EQ(consumer_->claim(1s, batch), SlotStatus::kOk);
  EXPECT_EQ(batch.view.batch_id(), 8u);
  EXPECT_EQ(consumer_->given_back(), 0u);
  EXPECT_EQ(returned(), 0u);
}

TEST_F(CopyTicketTest, SettleLeavesASlotRepublishedSinceAlone) {
  const uint32_t slot = publish_early(9);
  const uint64_t first = ticket_;
  ClaimedBatch batch;
  consumer_->set_copy_poller([](const PendingCopy&) { return true; });
  ASSERT_EQ(consumer_->claim(1s, batch), SlotStatus::kOk);
  ASSERT_TRUE(consumer_->release(batch).ok());
  // The slot is published again (another batch, another ticket) before the first settles.
  ASSERT_EQ(publish_early(10), slot);
  EXPECT_NE(ticket_, first);
  EXPECT_FALSE(settle_copy(target_->ring(), slot, first));
  EXPECT_TRUE(copy_pending(ring_->slot(slot).copy_ticket.load()));
  EXPECT_TRUE(settle_copy(target_->ring(), slot, ticket_));
}

TEST_F(CopyTicketTest, GiveBackRefusesALostClaimAndAProducerThatIsNoTarget) {
  publish_early(11);
  uint64_t rng = 3;
  ClaimResult claim = claim_ready_slot(drafter_->ring(), drafter_->identity(), 1, 0ms, rng);
  ASSERT_TRUE(claim);
  SlotClaim held = *claim;
  PendingCopy pending;
  ASSERT_TRUE(read_pending_copy(*ring_, held, pending));
  PendingCopy foreign = pending;
  foreign.producer = kDrafter0;  // a co-tenant's bytes: no target's progress to bump
  EXPECT_TRUE(give_back_unwritten(*ring_, held, foreign).lost());
  SlotClaim stale = held;
  ASSERT_TRUE(give_back_unwritten(*ring_, held, pending).ok());
  EXPECT_TRUE(give_back_unwritten(*ring_, stale, pending).lost());
  EXPECT_EQ(returned(), 1u);
}

}  // namespace
}  // namespace hsring
