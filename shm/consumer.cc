#include "shm/consumer.h"

#include "common/clock.h"
#include "common/random.h"
#include "shm/futex.h"
#include "shm/ledger.h"
#include "shm/slot_transition.h"

namespace hsring {

namespace {

// True when no more batches will arrive to make up hs_min_ready: the ring drains, or
// every target has published its whole shard.
bool no_more_batches(const Ring& ring) noexcept {
  if (ring.header().run_state.load(std::memory_order_acquire) != uint32_t(RunState::kRunning))
    return true;
  for (uint32_t t = 0; t < ring.shape().num_targets; ++t) {
    if (ring.target_progress(t).exhausted.load(std::memory_order_acquire) == 0) return false;
  }
  return true;
}

// Indices of the READY slots, in one pass over the slot headers.
uint32_t collect_ready(const Ring& ring, uint32_t* indices) noexcept {
  uint32_t ready = 0;
  for (uint32_t i = 0; i < ring.slot_count(); ++i) {
    if (SlotState(ring.slot(i).state.load(std::memory_order_relaxed)).phase() == SlotPhase::kReady)
      indices[ready++] = i;
  }
  return ready;
}

// The run has stopped for good (the launcher's last word): no batch will become READY.
bool stopped(const Ring& ring) noexcept {
  return ring.header().run_state.load(std::memory_order_acquire) == uint32_t(RunState::kStopped);
}

bool release_to(Ring& ring, SlotClaim& claim, SlotPhase phase) noexcept {
  SlotHeader& slot = ring.slot(claim.index);
  if (claim.word.phase() != SlotPhase::kReading) return false;
  // Release: our reads of the payload happen before a producer's acquire claim of the
  // FREE slot, so it never overwrites what we are still reading.
  return advance_claim(slot, claim, claim.word.next(phase, 0, 0));
}

}  // namespace

uint32_t count_ready(const Ring& ring) noexcept {
  uint32_t ready = 0;
  for (uint32_t i = 0; i < ring.slot_count(); ++i) {
    if (SlotState(ring.slot(i).state.load(std::memory_order_relaxed)).phase() == SlotPhase::kReady)
      ++ready;
  }
  return ready;
}

ClaimResult claim_ready_slot(Ring& ring, Identity self, uint32_t min_ready,
                             std::chrono::nanoseconds timeout, uint64_t& rng_state) noexcept {
  uint32_t ready_indices[kMaxSlots];
  uint64_t deadline = 0;  // taken on the first wait: the fast path reads no clock
  SharedCondition ready_condition(ring.header().ready_futex, ring.header().ready_waiters);
  auto needed = [&] { return no_more_batches(ring) ? 1u : min_ready; };
  while (true) {
    const uint32_t ready = collect_ready(ring, ready_indices);
    if (ready > 0 && ready >= needed()) {
      const uint32_t index = ready_indices[splitmix64(rng_state) % ready];
      SlotHeader& slot = ring.slot(index);
      const SlotState seen(slot.state.load(std::memory_order_relaxed));
      const SlotState reading = seen.next(SlotPhase::kReading, self.index, self.epoch);
      // SYNC POINT READ: acquire pairs with the producer's release CAS to READY, so the
      // payload and metadata are complete before we read them.
      if (seen.phase() == SlotPhase::kReady && transition_slot(slot, seen, reading))
        return ClaimResult(SlotClaim{index, reading});
      continue;  // lost a race to another consumer: the ring changed, draw again
    }
    if (stopped(ring)) return ClaimResult::stopping();
    const uint64_t now = monotonic_ns();
    if (deadline == 0) deadline = now + uint64_t(timeout.count());
    if (now >= deadline) return ClaimResult::timed_out();
    // The launcher wakes every waiter when it stops the run (supervisor.cc).
    ready_condition.wait_until([&] { return count_ready(ring) >= needed() || stopped(ring); },
                               std::chrono::nanoseconds(deadline - now));
  }
}

SlotResult release_consumed(Ring& ring, SlotClaim& claim) noexcept {
  SlotHeader& slot = ring.slot(claim.index);
  const uint64_t batch_id = slot.batch_id.load(std::memory_order_relaxed);
  // First the slot-local record, then the ledger, then the transition: a crash between
  // any two leaves enough for a recoverer to finish the same marks (recovery.cc).
  slot.consumed_word.store(claim.word.word(), std::memory_order_release);
  ledger_mark_consumed(ring, batch_id, claim.word);
  if (!release_to(ring, claim, SlotPhase::kFree)) return SlotResult(SlotStatus::kLost);
  SharedCondition(ring.header().free_futex, ring.header().free_waiters).notify();
  return SlotResult(SlotStatus::kOk);
}

SlotResult return_unread(Ring& ring, SlotClaim& claim) noexcept {
  if (!release_to(ring, claim, SlotPhase::kReady)) return SlotResult(SlotStatus::kLost);
  SharedCondition(ring.header().ready_futex, ring.header().ready_waiters).notify();
  return SlotResult(SlotStatus::kOk);
}

}  // namespace hsring
