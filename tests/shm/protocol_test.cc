// The slot protocol driven step by step in one thread: each worker is a WorkerSession on
// its own attach (its own open file description), so "killing" one is destroying its
// session, which drops its liveness lock exactly as the kernel does at process death.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <stdexcept>
#include <thread>

#include "common/error.h"
#include "shm/consumer.h"
#include "shm/ledger.h"
#include "shm/producer.h"
#include "shm/recovery.h"
#include "shm/worker_session.h"
#include "tests/shm/ring_test_util.h"
#include "worker/synthetic_batch.h"

namespace hsring {
namespace {

using namespace std::chrono_literals;
using test::ScopedRingName;

void require(bool condition, const std::string& what) {
  if (!condition) throw std::runtime_error("test setup failed: " + what);
}

class ProtocolTest : public ::testing::Test {
 protected:
  // tiny_shape: 8 slots, targets 0 and 1, drafters 2 and 3.
  static constexpr uint32_t kTarget0 = 0, kTarget1 = 1, kDrafter0 = 2, kDrafter1 = 3;

  void SetUp() override { ring_ = Ring::create(name_.str(), shape_); }

  // A new incarnation of worker `index`, as a separate process would start it.
  std::unique_ptr<WorkerSession> start(uint32_t index) {
    const Role role = index < shape_.num_targets ? Role::kTarget : Role::kDrafter;
    return WorkerSession::start(Ring::attach(name_.str()), index, role, 0ms);
  }

  SlotState word(uint32_t slot) const { return SlotState(ring_->slot(slot).state.load()); }
  uint64_t batch_in(uint32_t slot) const { return ring_->slot(slot).batch_id.load(); }
  LedgerEntry& ledger(uint64_t batch_id) const { return *ring_->ledger_entry(batch_id); }

  // Claims the first FREE slot from `hint` for `target` and binds `batch_id`: WRITING.
  SlotClaim begin_batch(WorkerSession& target, uint64_t batch_id, uint32_t hint = 0) {
    auto claim = claim_free_slot(target.ring(), target.identity(), hint, 0ms);
    require(claim.ok(), "no FREE slot");
    require(bind_batch(target.ring(), *claim, batch_id).ok(), "bind_batch");
    return *claim;
  }
  // Fills the synthetic batch bound to `claim` and publishes it: READY.
  void finish_batch(WorkerSession& target, SlotClaim& claim) {
    const BatchPlan plan = plan_batch(batch_in(claim.index), shape_);
    fill_synthetic_batch(target.ring(), claim.index, plan);
    require(publish(target.ring(), claim,
                    BatchInfo{plan.batch_id, plan.token_count, plan.num_docs, plan.length_bucket})
                .ok(),
            "publish");
  }
  uint32_t produce(WorkerSession& target, uint64_t batch_id, uint32_t hint = 0) {
    SlotClaim claim = begin_batch(target, batch_id, hint);
    finish_batch(target, claim);
    return claim.index;
  }
  SlotClaim take_ready(WorkerSession& drafter) {
    auto claim = claim_ready_slot(drafter.ring(), drafter.identity(), 1, 0ms, rng_);
    require(claim.ok(), "no READY slot");
    return *claim;
  }

  RingShape shape_ = test::tiny_shape();
  ScopedRingName name_{"proto"};
  std::unique_ptr<Ring> ring_;  // the creator's mapping: an observer and recoverer
  uint64_t rng_ = 42;
};

TEST_F(ProtocolTest, BatchGoesThroughEveryPhase) {
  auto target = start(kTarget0);
  auto drafter = start(kDrafter0);
  const Identity t = target->identity();
  ASSERT_EQ(t.epoch, 1u);

  auto claim = claim_free_slot(target->ring(), t, 3, 0ms);
  ASSERT_TRUE(claim);
  EXPECT_EQ(claim->index, 3u) << "the search starts at the hint";
  EXPECT_EQ(word(3), claim->word);
  EXPECT_EQ(word(3).phase(), SlotPhase::kClaimed);
  EXPECT_TRUE(word(3).held_by(t.index, t.epoch));

  ASSERT_TRUE(bind_batch(target->ring(), *claim, 17));
  EXPECT_EQ(word(3).phase(), SlotPhase::kWriting);
  EXPECT_TRUE(word(3).held_by(t.index, t.epoch));
  EXPECT_EQ(batch_in(3), 17u);
  EXPECT_EQ(ledger(17).flags.load() & kLedgerPublished, 0u) << "not published yet";

  finish_batch(*target, *claim);
  EXPECT_EQ(word(3).phase(), SlotPhase::kReady);
  EXPECT_FALSE(word(3).owned());
  EXPECT_EQ(ring_->slot(3).publish_seq.load(), 1u);
  EXPECT_EQ(ring_->slot(3).producer.load(), t.index);
  EXPECT_EQ(ring_->slot(3).token_count.load(), plan_batch(17, shape_).token_count);
  EXPECT_NE(ledger(17).flags.load() & kLedgerPublished, 0u);

  SlotClaim read = take_ready(*drafter);
  EXPECT_EQ(read.index, 3u);
  EXPECT_EQ(word(3).phase(), SlotPhase::kReading);
  EXPECT_TRUE(word(3).held_by(drafter->identity().index, drafter->identity().epoch));
  EXPECT_EQ(verify_synthetic_batch(drafter->ring(), 3), "");

  const SlotState reading_word = read.word;
  ASSERT_TRUE(release_consumed(drafter->ring(), read));
  EXPECT_EQ(word(3).phase(), SlotPhase::kFree);
  EXPECT_EQ(ring_->slot(3).consumed_word.load(), reading_word.word());
  EXPECT_EQ(ledger(17).consume_word.load(), reading_word.word());

  const LedgerTotals totals = ledger_totals(*ring_, 64);
  EXPECT_EQ(totals.published, 1u);
  EXPECT_EQ(totals.consumed, 1u);
  EXPECT_EQ(totals.duplicated, 0u);
  EXPECT_EQ(totals.lost, 0u);
  EXPECT_EQ(totals.in_ring, 0u);
}

TEST_F(ProtocolTest, SyntheticVerificationCatchesATornPayload) {
  // The stress tests rely on verify_synthetic_batch to see torn data: prove it does.
  auto target = start(kTarget0);
  const uint32_t slot = produce(*target, 5);
  ASSERT_EQ(verify_synthetic_batch(*ring_, slot), "");
  ring_->layer_region(slot, 1)[3] ^= std::byte{0x40};
  EXPECT_NE(verify_synthetic_batch(*ring_, slot), "");
}

TEST_F(ProtocolTest, TransitionsFromTheWrongPhaseFailAndChangeNothing) {
  auto target = start(kTarget0);
  auto drafter = start(kDrafter0);
  auto claimed = claim_free_slot(target->ring(), target->identity(), 0, 0ms);
  ASSERT_TRUE(claimed);
  const SlotState before = word(claimed->index);
  EXPECT_FALSE(publish(target->ring(), *claimed, BatchInfo{1, 1, 1, 0})) << "not WRITING";
  EXPECT_FALSE(adopt_orphaned_write(target->ring(), *claimed, target->identity()));
  EXPECT_FALSE(return_unread(target->ring(), *claimed)) << "not READING";
  EXPECT_EQ(word(claimed->index), before);
  EXPECT_EQ(claimed->word, before);

  SlotClaim writing = begin_batch(*target, 2, 4);
  EXPECT_FALSE(bind_batch(target->ring(), writing, 3)) << "already bound";
  EXPECT_FALSE(unclaim(target->ring(), writing)) << "a bound batch cannot be dropped";
  EXPECT_EQ(batch_in(writing.index), 2u);

  ASSERT_TRUE(unclaim(target->ring(), *claimed));
  EXPECT_EQ(word(claimed->index).phase(), SlotPhase::kFree);

  finish_batch(*target, writing);
  SlotClaim read = take_ready(*drafter);
  ASSERT_TRUE(return_unread(drafter->ring(), read));
  EXPECT_EQ(word(read.index).phase(), SlotPhase::kReady);
  EXPECT_EQ(ledger(2).consume_word.load(), 0u) << "returned unread is not consumed";
  EXPECT_FALSE(return_unread(drafter->ring(), read)) << "the claim now holds a READY word";
}

TEST_F(ProtocolTest, ClaimFreeSlotFailsWhenNoneIsFreeOrTheRingStops) {
  auto target = start(kTarget0);
  std::vector<SlotClaim> claims;
  for (uint32_t i = 0; i < shape_.slot_count; ++i) {
    auto claim = claim_free_slot(target->ring(), target->identity(), i, 0ms);
    ASSERT_TRUE(claim);
    EXPECT_EQ(claim->index, i);
    claims.push_back(*claim);
  }
  EXPECT_EQ(claim_free_slot(target->ring(), target->identity(), 0, 20ms).status(),
            SlotStatus::kTimedOut);
  ASSERT_TRUE(unclaim(target->ring(), claims[5]));
  ring_->header().run_state.store(uint32_t(RunState::kDraining));
  EXPECT_EQ(claim_free_slot(target->ring(), target->identity(), 0, 0ms).status(),
            SlotStatus::kStopping)
      << "a draining ring hands out no FREE slot";
  ring_->header().run_state.store(uint32_t(RunState::kRunning));
  auto claim = claim_free_slot(target->ring(), target->identity(), 0, 0ms);
  ASSERT_TRUE(claim);
  EXPECT_EQ(claim->index, 5u);
}

// A waiter sleeping on the futex is woken by the change it waits for. Its own timeout is
// far beyond the test's ctest TIMEOUT, so a lost wake fails the test instead of passing late.
TEST_F(ProtocolTest, WaitersAreWokenByPublishAndByRelease) {
  auto target = start(kTarget0);
  auto drafter = start(kDrafter0);
  ClaimResult got;
  std::thread consumer([&] {
    uint64_t rng = 7;
    got = claim_ready_slot(drafter->ring(), drafter->identity(), 1, 600s, rng);
  });
  while (ring_->header().ready_waiters.load() == 0) std::this_thread::yield();
  const uint32_t slot = produce(*target, 11);
  consumer.join();
  ASSERT_TRUE(got);
  EXPECT_EQ(got->index, slot);

  // Now fill the ring, and let a producer wait for the slot the consumer frees.
  std::vector<uint32_t> filled;
  while (auto claim = claim_free_slot(target->ring(), target->identity(), 0, 0ms))
    filled.push_back(claim->index);
  ASSERT_EQ(filled.size(), shape_.slot_count - 1);
  ClaimResult free_claim;
  std::thread producer(
      [&] { free_claim = claim_free_slot(target->ring(), target->identity(), 0, 600s); });
  while (ring_->header().free_waiters.load() == 0) std::this_thread::yield();
  ASSERT_TRUE(release_consumed(drafter->ring(), *got));
  producer.join();
  ASSERT_TRUE(free_claim);
  EXPECT_EQ(free_claim->index, slot);
}

TEST_F(ProtocolTest, SessionStartRules) {
  auto target = start(kTarget0);
  EXPECT_EQ(target->identity().epoch, 1u);
  ProcessEntry& entry = ring_->process(kTarget0);
  EXPECT_EQ(entry.pid.load(), ::getpid());
  EXPECT_EQ(entry.starts.load(), 1u);
  EXPECT_EQ(ProcessState(entry.state.load()), ProcessState::kStarting);

  try {
    start(kTarget0);
    ADD_FAILURE() << "a second live incarnation of one index was allowed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kRingProcessBusy) << e.what();
    EXPECT_NE(std::string(e.what()).find(name_.str()), std::string::npos) << e.what();
  }
  EXPECT_THROW(WorkerSession::start(Ring::attach(name_.str()), kDrafter0, Role::kTarget, 0ms),
               Error)
      << "index 2 is a drafter";
  EXPECT_THROW(WorkerSession::start(Ring::attach(name_.str()), 4, Role::kDrafter, 0ms), Error)
      << "only 4 workers";

  target.reset();  // dies: its lock goes with its descriptor
  EXPECT_EQ(ProcessState(entry.state.load()), ProcessState::kExited);
  auto again = start(kTarget0);
  EXPECT_EQ(again->identity().epoch, 2u);
  EXPECT_EQ(entry.starts.load(), 2u);
}

TEST_F(ProtocolTest, RecoveryTouchesOnlyDeadOwners) {
  auto live_target = start(kTarget0);
  auto live_drafter = start(kDrafter0);
  auto dead_target = start(kTarget1);
  auto dead_drafter = start(kDrafter1);

  // Live owners: a CLAIMED, a WRITING and a READING slot.
  auto live_claimed = claim_free_slot(live_target->ring(), live_target->identity(), 0, 0ms);
  ASSERT_TRUE(live_claimed);
  SlotClaim live_writing = begin_batch(*live_target, 100);
  produce(*dead_target, 101);
  SlotClaim live_reading = take_ready(*live_drafter);
  // Dead owners, the same three phases.
  auto dead_claimed = claim_free_slot(dead_target->ring(), dead_target->identity(), 0, 0ms);
  ASSERT_TRUE(dead_claimed);
  SlotClaim dead_writing = begin_batch(*dead_target, 103);
  produce(*live_target, 104);
  SlotClaim dead_reading = take_ready(*dead_drafter);
  const uint32_t live_slots[] = {live_claimed->index, live_writing.index, live_reading.index};
  std::map<uint32_t, SlotState> before;
  for (uint32_t i = 0; i < shape_.slot_count; ++i) before[i] = word(i);

  // Nobody is dead yet: a recoverer (here the creator's mapping) finds nothing to do, and
  // neither does a live worker, whose own lock its probe cannot see.
  EXPECT_EQ(recover_dead_owners(*ring_).total(), 0u);
  EXPECT_EQ(recover_dead_owners(live_target->ring()).total(), 0u);
  for (uint32_t i = 0; i < shape_.slot_count; ++i) EXPECT_EQ(word(i), before[i]) << "slot " << i;

  dead_target.reset();
  dead_drafter.reset();
  const RecoveryStats stats = recover_dead_owners(*ring_);
  EXPECT_EQ(stats.freed, 1u);
  EXPECT_EQ(stats.redelivered, 1u);
  EXPECT_EQ(stats.orphaned, 1u);
  EXPECT_EQ(ring_->header().slots_recovered.load(), 2u);
  for (uint32_t slot : live_slots) EXPECT_EQ(word(slot), before[slot]) << "live slot " << slot;
  EXPECT_EQ(word(dead_claimed->index).phase(), SlotPhase::kFree);
  EXPECT_EQ(word(dead_reading.index).phase(), SlotPhase::kReady);
  EXPECT_EQ(word(dead_writing.index), before[dead_writing.index]) << "WRITING waits for adoption";
  EXPECT_NE(ledger(batch_in(dead_reading.index)).flags.load() & kLedgerRedelivered, 0u);

  // A second recoverer finds nothing left to do.
  const RecoveryStats again = recover_dead_owners(*ring_);
  EXPECT_EQ(again.total(), 0u);
  EXPECT_EQ(again.orphaned, 1u);

  // The live owners carry on undisturbed.
  finish_batch(*live_target, live_writing);
  EXPECT_TRUE(release_consumed(live_drafter->ring(), live_reading));
  EXPECT_TRUE(unclaim(live_target->ring(), *live_claimed));
}

TEST_F(ProtocolTest, SlotsOfAnOlderEpochOfALiveIndexAreRecovered) {
  // Index 0 is alive in epoch 2; a word naming its epoch 1 (left by a dead incarnation)
  // is recovered, its epoch-2 slot is not. The stale word is written by hand: a real
  // epoch-2 start would already have recovered it.
  auto first = start(kTarget0);
  first.reset();
  auto target = start(kTarget0);
  ASSERT_EQ(target->identity().epoch, 2u);
  auto mine = claim_free_slot(target->ring(), target->identity(), 0, 0ms);
  ASSERT_TRUE(mine);
  const SlotState stale = word(6).next(SlotPhase::kClaimed, kTarget0, 1);
  ring_->slot(6).state.store(stale.word());

  const RecoveryStats stats = recover_dead_owners(*ring_);
  EXPECT_EQ(stats.freed, 1u);
  EXPECT_EQ(word(6).phase(), SlotPhase::kFree);
  EXPECT_EQ(word(mine->index), mine->word);
}

TEST_F(ProtocolTest, StaleClaimedOwnerCannotBindAfterRecovery) {
  auto target = start(kTarget0);
  auto claim = claim_free_slot(target->ring(), target->identity(), 2, 0ms);
  ASSERT_TRUE(claim);
  target.reset();
  ASSERT_EQ(recover_dead_owners(*ring_).freed, 1u);
  const SlotState after = word(claim->index);
  EXPECT_EQ(after.phase(), SlotPhase::kFree);

  // The stale claim, replayed through another mapping of the segment.
  SlotClaim stale = *claim;
  EXPECT_FALSE(bind_batch(*ring_, stale, 9));
  EXPECT_FALSE(unclaim(*ring_, stale));
  EXPECT_EQ(word(claim->index), after);
  // Even after the slot comes back to the same phase, owner and epoch (a new claim by a
  // restarted incarnation would differ in epoch; this is the strongest case), the old
  // word is dead: only the version tells them apart.
  const SlotState same_owner = after.next(SlotPhase::kClaimed, kTarget0, claim->word.epoch());
  ring_->slot(claim->index).state.store(same_owner.word());
  EXPECT_FALSE(bind_batch(*ring_, stale, 9));
  EXPECT_EQ(word(claim->index), same_owner);
}

TEST_F(ProtocolTest, StaleReaderCannotReleaseAfterRestart) {
  auto target = start(kTarget0);
  produce(*target, 30);
  auto drafter = start(kDrafter0);
  SlotClaim read = take_ready(*drafter);
  drafter.reset();

  // The restarted drafter returns its previous epoch's slot at start.
  auto restarted = start(kDrafter0);
  EXPECT_EQ(restarted->recovered_at_start().redelivered, 1u);
  EXPECT_EQ(word(read.index).phase(), SlotPhase::kReady);
  SlotClaim stale = read;
  EXPECT_FALSE(return_unread(*ring_, stale));
  EXPECT_EQ(word(read.index).phase(), SlotPhase::kReady);

  SlotClaim again = take_ready(*restarted);
  EXPECT_EQ(again.index, read.index);
  EXPECT_FALSE(release_consumed(*ring_, stale)) << "the old epoch's word is gone";
  EXPECT_TRUE(word(read.index).held_by(kDrafter0, 2));
  EXPECT_TRUE(release_consumed(restarted->ring(), again));
  EXPECT_EQ(word(read.index).phase(), SlotPhase::kFree);
}

TEST_F(ProtocolTest, ReadingOfADeadConsumerGoesBackToReadyAndIsMarkedRedelivered) {
  auto target = start(kTarget0);
  const uint32_t slot = produce(*target, 9);
  auto drafter = start(kDrafter0);
  SlotClaim read = take_ready(*drafter);
  drafter.reset();

  const RecoveryStats stats = recover_dead_owners(*ring_);
  EXPECT_EQ(stats.redelivered, 1u);
  EXPECT_EQ(stats.freed, 0u);
  EXPECT_EQ(word(slot).phase(), SlotPhase::kReady);
  EXPECT_EQ(batch_in(slot), 9u);
  EXPECT_EQ(ledger(9).consume_word.load(), 0u);

  auto other = start(kDrafter1);
  SlotClaim again = take_ready(*other);
  EXPECT_EQ(again.index, read.index);
  EXPECT_EQ(verify_synthetic_batch(other->ring(), slot), "") << "the payload is intact";
  ASSERT_TRUE(release_consumed(other->ring(), again));
  const LedgerTotals totals = ledger_totals(*ring_, 64);
  EXPECT_EQ(totals.consumed, 1u);
  EXPECT_EQ(totals.redelivered, 1u);
  EXPECT_EQ(totals.duplicated, 0u);
  EXPECT_EQ(totals.lost, 0u);
}

// release_consumed stores consumed_word, marks the ledger, then frees. A consumer that
// dies after its marks must have its batch counted once and its slot freed, not redelivered.
TEST_F(ProtocolTest, ReadingOfAConsumerThatFinishedIsFreedAndCountedOnce) {
  auto target = start(kTarget0);
  const uint32_t slot = produce(*target, 9);
  auto drafter = start(kDrafter0);
  SlotClaim read = take_ready(*drafter);
  // Its last steps before dying: both marks, not the CAS to FREE.
  ring_->slot(slot).consumed_word.store(read.word.word());
  ASSERT_EQ(ledger_mark_consumed(*ring_, 9, read.word), ConsumeMark::kFirst);
  drafter.reset();

  const RecoveryStats stats = recover_dead_owners(*ring_);
  EXPECT_EQ(stats.freed, 1u);
  EXPECT_EQ(stats.redelivered, 0u);
  EXPECT_EQ(word(slot).phase(), SlotPhase::kFree);
  EXPECT_EQ(ledger(9).consume_word.load(), read.word.word());
  EXPECT_EQ(ledger(9).duplicates.load(), 0u) << "the recoverer's repeated mark is a no-op";
  const LedgerTotals totals = ledger_totals(*ring_, 64);
  EXPECT_EQ(totals.consumed, 1u);
  EXPECT_EQ(totals.duplicated, 0u);
  EXPECT_EQ(totals.redelivered, 0u);
  EXPECT_EQ(totals.lost, 0u);
}

TEST_F(ProtocolTest, ConsumerThatDiedBetweenItsTwoMarksIsCountedByTheRecoverer) {
  auto target = start(kTarget0);
  const uint32_t slot = produce(*target, 12);
  auto drafter = start(kDrafter0);
  SlotClaim read = take_ready(*drafter);
  ring_->slot(slot).consumed_word.store(read.word.word());  // and died before the ledger
  drafter.reset();

  EXPECT_EQ(recover_dead_owners(*ring_).freed, 1u);
  EXPECT_EQ(word(slot).phase(), SlotPhase::kFree);
  EXPECT_EQ(ledger(12).consume_word.load(), read.word.word());
  EXPECT_EQ(ledger_totals(*ring_, 64).consumed, 1u);
}

TEST_F(ProtocolTest, ConsumedWordOfAnEarlierClaimDoesNotCountAsFinished) {
  // consumed_word from the slot's previous consumption must not free the next reading.
  auto target = start(kTarget0);
  auto drafter = start(kDrafter0);
  const uint32_t slot = produce(*target, 1, 0);
  SlotClaim first = take_ready(*drafter);
  ASSERT_TRUE(release_consumed(drafter->ring(), first));
  ASSERT_EQ(produce(*target, 3, slot), slot);
  SlotClaim second = take_ready(*drafter);
  ASSERT_EQ(second.index, slot);
  drafter.reset();
  EXPECT_EQ(recover_dead_owners(*ring_).redelivered, 1u);
  EXPECT_EQ(word(slot).phase(), SlotPhase::kReady);
  EXPECT_EQ(ledger(3).consume_word.load(), 0u);
}

// The race CI caught once in 160 K batches: a recoverer reads READING(drafter, W); the
// drafter finishes (consumed_word = W), frees the slot and dies; a target rebinds the slot
// to another batch. The recoverer, acting on its stale W, must not mark that batch
// consumed by W: the real consumer's mark would then count it twice.
TEST_F(ProtocolTest, StaleReadingWordOfAFinishedConsumerLeavesTheReboundSlotAlone) {
  auto target = start(kTarget0);
  auto drafter = start(kDrafter0);
  const uint32_t slot = produce(*target, 1, 0);
  SlotClaim finished = take_ready(*drafter);
  const SlotState stale = finished.word;  // what the slow recoverer read
  ASSERT_TRUE(release_consumed(drafter->ring(), finished));
  drafter.reset();

  for (const bool published : {false, true}) {
    SCOPED_TRACE(published ? "rebound batch READY" : "rebound batch WRITING");
    const uint64_t next = published ? 5 : 3;
    SlotClaim rebound = begin_batch(*target, next, slot);
    ASSERT_EQ(rebound.index, slot);
    if (published) finish_batch(*target, rebound);
    const SlotState before = word(slot);
    RecoveryStats stats;
    recover_slot_as_seen(*ring_, slot, stale, stats);
    EXPECT_EQ(stats.total(), 0u);
    EXPECT_EQ(word(slot), before) << "the slot moved on; the stale word must not touch it";
    EXPECT_EQ(ledger(next).consume_word.load(), 0u) << "batch " << next << " is not consumed";
    if (!published) finish_batch(*target, rebound);

    auto reader = start(kDrafter1);
    SlotClaim real = take_ready(*reader);
    ASSERT_EQ(real.index, slot);
    ASSERT_TRUE(release_consumed(reader->ring(), real));
    EXPECT_EQ(ledger(next).duplicates.load(), 0u);
  }
  const LedgerTotals totals = ledger_totals(*ring_, 64);
  EXPECT_EQ(totals.consumed, 3u);
  EXPECT_EQ(totals.duplicated, 0u);
  EXPECT_EQ(ledger(1).consume_word.load(), stale.word());
}

TEST_F(ProtocolTest, ClaimedSlotOfADeadProducerIsFreedAtItsRestart) {
  auto target = start(kTarget0);
  auto claim = claim_free_slot(target->ring(), target->identity(), 0, 0ms);
  ASSERT_TRUE(claim);
  target.reset();
  auto restarted = start(kTarget0);
  EXPECT_EQ(restarted->recovered_at_start().freed, 1u);
  EXPECT_EQ(word(claim->index).phase(), SlotPhase::kFree);
  EXPECT_EQ(ring_->process(kTarget0).recovered.load(), 1u);
}

TEST_F(ProtocolTest, SuccessorAdoptsUnpublishedWritesAndKeepsTheirBatchIds) {
  auto target = start(kTarget0);
  auto other = start(kTarget1);
  SlotClaim first = begin_batch(*target, 42, 0);
  SlotClaim second = begin_batch(*target, 44, 0);
  SlotClaim foreign = begin_batch(*other, 43, 0);
  // Half-written: some payload, no publish.
  fill_synthetic_batch(target->ring(), first.index, plan_batch(7, shape_));
  target.reset();
  other.reset();

  auto successor = start(kTarget0);
  const Identity self = successor->identity();
  EXPECT_EQ(successor->recovered_at_start().orphaned, 2u);
  EXPECT_EQ(successor->recovered_at_start().total(), 0u) << "WRITING is never freed";
  EXPECT_EQ(word(first.index), first.word) << "start leaves WRITING to adoption";

  std::vector<SlotClaim> adopted = adopt_previous_writes(successor->ring(), self);
  ASSERT_EQ(adopted.size(), 2u) << "its own two, not target 1's";
  std::map<uint32_t, uint64_t> ids;
  for (const SlotClaim& claim : adopted) {
    EXPECT_EQ(word(claim.index), claim.word);
    EXPECT_EQ(claim.word.phase(), SlotPhase::kWriting);
    EXPECT_TRUE(claim.word.held_by(self.index, self.epoch));
    ids[claim.index] = batch_in(claim.index);
  }
  EXPECT_EQ(ids[first.index], 42u);
  EXPECT_EQ(ids[second.index], 44u);
  EXPECT_EQ(word(foreign.index), foreign.word);
  EXPECT_EQ(ring_->header().slots_adopted.load(), 2u);
  EXPECT_TRUE(adopt_previous_writes(successor->ring(), self).empty()) << "nothing left";

  // The stale incarnation can do nothing with them; the successor re-produces them.
  SlotClaim stale = first;
  EXPECT_FALSE(publish(*ring_, stale, BatchInfo{42, 1, 1, 0}));
  EXPECT_FALSE(adopt_orphaned_write(*ring_, stale, Identity{kTarget0, 9}));
  for (SlotClaim& claim : adopted) finish_batch(*successor, claim);
  EXPECT_EQ(verify_synthetic_batch(*ring_, first.index), "");
  EXPECT_EQ(batch_in(first.index), 42u);
  EXPECT_NE(ledger(42).flags.load() & kLedgerPublished, 0u);
}

TEST_F(ProtocolTest, AdoptOrphanedWriteSucceedsOnceFromTheOrphanedWord) {
  auto target = start(kTarget1);
  SlotClaim orphan = begin_batch(*target, 5);
  target.reset();
  auto successor = start(kTarget1);
  SlotClaim a = orphan, b = orphan;
  ASSERT_TRUE(adopt_orphaned_write(successor->ring(), a, successor->identity()));
  EXPECT_TRUE(a.word.held_by(kTarget1, 2));
  EXPECT_EQ(batch_in(a.index), 5u);
  EXPECT_FALSE(adopt_orphaned_write(successor->ring(), b, successor->identity()))
      << "a second adoption from the same orphaned word must lose";
  EXPECT_EQ(word(a.index), a.word);
}

TEST_F(ProtocolTest, LedgerMarksAreIdempotentPerClaim) {
  const SlotState w1 = SlotState::make(SlotPhase::kReading, 2, 1, 10);
  const SlotState w2 = SlotState::make(SlotPhase::kReading, 3, 1, 20);
  EXPECT_EQ(ledger_mark_consumed(*ring_, 5, w1), ConsumeMark::kFirst);
  EXPECT_EQ(ledger_mark_consumed(*ring_, 5, w1), ConsumeMark::kRepeat);
  EXPECT_EQ(ledger(5).duplicates.load(), 0u);
  EXPECT_EQ(ledger_mark_consumed(*ring_, 5, w2), ConsumeMark::kDuplicate);
  EXPECT_EQ(ledger_mark_consumed(*ring_, 5, w1), ConsumeMark::kRepeat);
  EXPECT_EQ(ledger(5).duplicates.load(), 1u);
  EXPECT_EQ(ledger(5).consume_word.load(), w1.word()) << "the first claim stays recorded";
  EXPECT_NE(ledger(5).flags.load() & kLedgerPublished, 0u) << "consumed implies published";

  const uint64_t beyond = shape_.ledger_capacity;
  EXPECT_EQ(ring_->ledger_entry(beyond), nullptr);
  EXPECT_EQ(ledger_mark_consumed(*ring_, beyond, w1), ConsumeMark::kUntracked);
  ledger_mark_published(*ring_, beyond);  // ignored, not out of bounds
  ledger_mark_torn(*ring_, beyond);

  ledger_mark_published(*ring_, 6);
  ledger_mark_published(*ring_, 6);
  const LedgerTotals totals = ledger_totals(*ring_);
  EXPECT_EQ(totals.published, 2u);
  EXPECT_EQ(totals.consumed, 1u);
  EXPECT_EQ(totals.duplicated, 1u);
  EXPECT_EQ(totals.lost, 1u) << "batch 6: published, never consumed, not in the ring";
}

TEST_F(ProtocolTest, LedgerTotalsSeparateLostFromInRing) {
  auto target = start(kTarget0);
  auto drafter = start(kDrafter0);
  produce(*target, 0);
  SlotClaim done = take_ready(*drafter);
  ASSERT_TRUE(release_consumed(drafter->ring(), done));  // 0: consumed
  produce(*target, 1);
  SlotClaim reading = take_ready(*drafter);  // 1: READING, in the ring
  produce(*target, 2);                       // 2: READY, in the ring
  begin_batch(*target, 3);                   // 3: WRITING, not published
  ledger_mark_published(*ring_, 4);          // 4: published, gone: lost
  ledger_mark_torn(*ring_, 0);
  ASSERT_EQ(batch_in(reading.index), 1u);

  LedgerTotals totals = ledger_totals(*ring_, 8);
  EXPECT_EQ(totals.published, 4u);  // 0, 1, 2, 4
  EXPECT_EQ(totals.consumed, 1u);
  EXPECT_EQ(totals.in_ring, 2u);
  EXPECT_EQ(totals.lost, 1u);
  EXPECT_EQ(totals.torn, 1u);
  EXPECT_EQ(totals.duplicated, 0u);
  EXPECT_EQ(ledger_count_consumed(*ring_, 8), 1u);

  totals = ledger_totals(*ring_, 1);  // ids below the limit only; slots always counted
  EXPECT_EQ(totals.published, 1u);
  EXPECT_EQ(totals.lost, 0u);
  EXPECT_EQ(totals.in_ring, 2u);
}

class MinReadyTest : public ProtocolTest {
 protected:
  MinReadyTest() { shape_.hs_min_ready = 3; }
  ClaimResult try_take(WorkerSession& drafter, std::chrono::nanoseconds wait = 0ms) {
    return claim_ready_slot(drafter.ring(), drafter.identity(), shape_.hs_min_ready, wait, rng_);
  }
};

TEST_F(MinReadyTest, NoClaimUntilMinReadyUnlessNoMoreBatchesCanCome) {
  auto target = start(kTarget0);
  auto drafter = start(kDrafter0);
  produce(*target, 0);
  produce(*target, 2);
  EXPECT_FALSE(try_take(*drafter));
  EXPECT_FALSE(try_take(*drafter, 20ms)) << "waiting does not lower the bar";
  EXPECT_EQ(count_ready(*ring_), 2u) << "and nothing was taken";

  produce(*target, 4);
  auto claim = try_take(*drafter);
  ASSERT_TRUE(claim);
  EXPECT_EQ(count_ready(*ring_), 2u);
  EXPECT_FALSE(try_take(*drafter));

  // Every target exhausted: one READY slot is enough.
  ring_->target_progress(kTarget0).exhausted.store(1);
  EXPECT_FALSE(try_take(*drafter)) << "target 1 may still publish";
  ring_->target_progress(kTarget1).exhausted.store(1);
  auto second = try_take(*drafter);
  ASSERT_TRUE(second);
  ring_->target_progress(kTarget1).exhausted.store(0);
  EXPECT_FALSE(try_take(*drafter));

  // A draining ring waives it too; with nothing READY there is still nothing to take.
  ring_->header().run_state.store(uint32_t(RunState::kDraining));
  auto third = try_take(*drafter);
  ASSERT_TRUE(third);
  EXPECT_EQ(count_ready(*ring_), 0u);
  EXPECT_FALSE(try_take(*drafter));
}

TEST_F(ProtocolTest, RandomPullReachesEveryReadySlotAndOnlyThose) {
  auto target = start(kTarget0);
  auto drafter = start(kDrafter0);
  // READY in every slot but 2 and 5, which end up FREE: the pick must skip the gaps.
  std::map<uint32_t, int> hits;
  std::vector<SlotClaim> gaps;
  for (uint32_t i = 0; i < shape_.slot_count; ++i) {
    if (i == 2 || i == 5) {
      auto gap = claim_free_slot(target->ring(), target->identity(), i, 0ms);
      ASSERT_TRUE(gap);
      gaps.push_back(*gap);
    } else {
      hits[produce(*target, 2 * i, i)] = 0;
    }
  }
  for (SlotClaim& gap : gaps) ASSERT_TRUE(unclaim(target->ring(), gap));
  ASSERT_EQ(hits.size(), 6u);

  constexpr int kDraws = 6000;
  for (int draw = 0; draw < kDraws; ++draw) {
    SlotClaim claim = take_ready(*drafter);
    ASSERT_TRUE(hits.count(claim.index)) << "claimed slot " << claim.index << ", not READY";
    ++hits[claim.index];
    ASSERT_TRUE(return_unread(drafter->ring(), claim));
  }
  // Deterministic (fixed seed); loose bounds that any uniform pick meets.
  const int expected = kDraws / int(hits.size());
  for (const auto& [slot, count] : hits) {
    EXPECT_GT(count, expected / 2) << "slot " << slot;
    EXPECT_LT(count, expected * 3 / 2) << "slot " << slot;
  }
  EXPECT_EQ(count_ready(*ring_), 6u);
  EXPECT_EQ(ledger_count_consumed(*ring_, 64), 0u);
}

}  // namespace
}  // namespace hsring
