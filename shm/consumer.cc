#include "shm/consumer.h"

#include "common/clock.h"
#include "common/random.h"
#include "shm/futex.h"
#include "shm/ledger.h"
#include "shm/ordered_claims.h"
#include "shm/slot_hints.h"
#include "shm/slot_transition.h"

namespace hsring {

namespace {

// The run no longer runs: what is READY is all that may still come.
bool draining(const Ring& ring) noexcept {
  return ring.header().run_state.load(std::memory_order_acquire) != uint32_t(RunState::kRunning);
}

// True when no more batches will arrive to make up hs_min_ready: the ring drains, or
// every target has published its whole shard.
bool no_more_batches(const Ring& ring) noexcept {
  if (draining(ring)) return true;
  for (uint32_t t = 0; t < ring.shape().num_targets; ++t) {
    if (ring.target_progress(t).exhausted.load(std::memory_order_acquire) == 0) return false;
  }
  return true;
}

// The slow path, taken only when the READY hints name fewer than a claim needs: one pass
// over every slot word, collecting the READY indices and restoring any hint a dead actor
// left unset, so hints never hide a READY slot for longer than one attempt.
uint32_t scan_ready(Ring& ring, uint32_t* indices) noexcept {
  uint32_t ready = 0;
  for (uint32_t i = 0; i < ring.slot_count(); ++i) {
    const SlotState seen(ring.slot(i).state.load(std::memory_order_relaxed));
    if (!seen.phase_valid() || seen.phase() != SlotPhase::kReady) continue;
    indices[ready++] = i;
    restore_hint(ring, i, SlotPhase::kReady);
  }
  return ready;
}

// The `rank`-th set bit (from 0) of `bits[0, words)`. REQUIRES: rank < their popcount.
uint32_t nth_set_bit(const uint64_t* bits, uint32_t words, uint32_t rank) noexcept {
  for (uint32_t w = 0; w < words; ++w) {
    const uint32_t here = uint32_t(__builtin_popcountll(bits[w]));
    if (rank >= here) {
      rank -= here;
      continue;
    }
    uint64_t mask = bits[w];
    for (; rank > 0; --rank) mask &= mask - 1;
    return w * 64 + uint32_t(__builtin_ctzll(mask));
  }
  return 0;  // unreachable under the precondition
}

// The run has stopped for good (the launcher's last word): no batch will become READY.
bool stopped(const Ring& ring) noexcept {
  return ring.header().run_state.load(std::memory_order_acquire) == uint32_t(RunState::kStopped);
}

// The READY slot holding `batch_id`, or (with `any`) the READY slot of the smallest id;
// kMaxSlots when there is none. A scan of every slot word: ordered claims take one id, which
// the hints cannot find.
uint32_t find_ready(const Ring& ring, uint64_t batch_id, bool any) noexcept {
  uint32_t found = kMaxSlots;
  uint64_t found_id = UINT64_MAX;
  for (uint32_t i = 0; i < ring.slot_count(); ++i) {
    const SlotState seen(ring.slot(i).state.load(std::memory_order_relaxed));
    if (!seen.phase_valid() || seen.phase() != SlotPhase::kReady) continue;
    // Relaxed: a guess to choose by, checked again after the claim.
    const uint64_t id = ring.slot(i).batch_id.load(std::memory_order_relaxed);
    if (id == batch_id) return i;
    if (any && id < found_id) {
      found = i;
      found_id = id;
    }
  }
  return found;
}

bool release_to(Ring& ring, SlotClaim& claim, SlotPhase phase) noexcept {
  if (claim.word.phase() != SlotPhase::kReading) return false;
  // Release: our reads of the payload happen before a producer's acquire claim of the
  // FREE slot, so it never overwrites what we are still reading.
  return advance_claim(ring, claim, claim.word.next(phase, 0, 0));
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
  uint64_t bits[kHintWords];
  uint64_t deadline = 0;  // taken on the first wait: the fast path reads no clock
  SharedCondition ready_condition(ring.header().ready_futex, ring.header().ready_waiters);
  auto needed = [&] { return no_more_batches(ring) ? 1u : min_ready; };
  while (true) {
    const uint32_t need = min_ready <= 1 ? 1u : needed();  // skip the targets' loads
    // Fast path: a uniform draw among the hinted slots, O(slots / 64) word loads. The
    // count may include a bit that went stale an instant ago, as a scan of the words
    // could count a slot being claimed meanwhile; a stale bit drawn is dropped (a dead
    // actor's stale bit counts until drawn or repaired: ring-protocol.md, "Claim hints").
    const uint32_t words = snapshot_hints(ring, SlotPhase::kReady, bits);
    uint32_t hinted = 0;
    for (uint32_t w = 0; w < words; ++w) hinted += uint32_t(__builtin_popcountll(bits[w]));
    uint32_t index = kMaxSlots;
    if (hinted > 0 && hinted >= need) {
      index = nth_set_bit(bits, words, uint32_t(splitmix64(rng_state) % hinted));
    } else if (const uint32_t ready = scan_ready(ring, ready_indices); ready > 0 && ready >= need) {
      index = ready_indices[splitmix64(rng_state) % ready];
    }
    if (index != kMaxSlots) {
      const SlotState seen(ring.slot(index).state.load(std::memory_order_relaxed));
      if (seen.phase_valid() && seen.phase() == SlotPhase::kReady) {
        const SlotState reading = seen.next(SlotPhase::kReading, self.index, self.epoch);
        // SYNC POINT READ: acquire (in the seq_cst CAS) pairs with the producer's release
        // CAS to READY, so the payload and metadata are complete before we read them.
        if (transition_slot(ring, index, seen, reading))
          return ClaimResult(SlotClaim{index, reading});
      } else {
        drop_stale_hint(ring, index, SlotPhase::kReady);
      }
      continue;  // lost a race to another consumer, or a stale hint: draw again
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

ClaimResult claim_batch_in_order(Ring& ring, Identity self, uint64_t batch_id,
                                 std::chrono::nanoseconds timeout) noexcept {
  uint64_t deadline = 0;  // taken on the first wait
  SharedCondition ready_condition(ring.header().ready_futex, ring.header().ready_waiters);
  while (true) {
    const bool any = draining(ring);
    if (const uint32_t index = find_ready(ring, batch_id, any); index != kMaxSlots) {
      const SlotState seen(ring.slot(index).state.load(std::memory_order_relaxed));
      if (seen.phase_valid() && seen.phase() == SlotPhase::kReady) {
        const SlotState reading = seen.next(SlotPhase::kReading, self.index, self.epoch);
        // SYNC POINT READ: acquire (in the seq_cst CAS) pairs with the producer's release
        // CAS to READY, as in claim_ready_slot.
        if (transition_slot(ring, index, seen, reading)) {
          SlotClaim claim{index, reading};
          // The slot may have been consumed and refilled between the scan and the CAS.
          const uint64_t held = ring.slot(index).batch_id.load(std::memory_order_relaxed);
          if (held == batch_id || any) return ClaimResult(claim);
          (void)return_unread(ring, claim);
        }
      }
      continue;
    }
    if (stopped(ring)) return ClaimResult::stopping();
    const uint64_t now = monotonic_ns();
    if (deadline == 0) deadline = now + uint64_t(timeout.count());
    if (now >= deadline) return ClaimResult::timed_out();
    // Publishers wake every waiter under ordered claims (notify_slot_change).
    ready_condition.wait_until(
        [&] { return find_ready(ring, batch_id, draining(ring)) != kMaxSlots || stopped(ring); },
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
  if (ring.shape().ordered_claims) advance_ordered_floor(ring);
  notify_slot_change(ring, SharedCondition(ring.header().free_futex, ring.header().free_waiters));
  return SlotResult(SlotStatus::kOk);
}

SlotResult return_unread(Ring& ring, SlotClaim& claim) noexcept {
  if (!release_to(ring, claim, SlotPhase::kReady)) return SlotResult(SlotStatus::kLost);
  notify_slot_change(ring, SharedCondition(ring.header().ready_futex, ring.header().ready_waiters));
  return SlotResult(SlotStatus::kOk);
}

}  // namespace hsring
