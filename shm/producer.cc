#include "shm/producer.h"

#include <cstring>

#include "common/clock.h"
#include "shm/futex.h"
#include "shm/ledger.h"
#include "shm/ordered_claims.h"
#include "shm/slot_hints.h"
#include "shm/slot_transition.h"

namespace hsring {

namespace {

SharedCondition free_condition(Ring& ring) noexcept {
  return SharedCondition(ring.header().free_futex, ring.header().free_waiters);
}

bool stopping(const Ring& ring) noexcept {
  return ring.header().run_state.load(std::memory_order_acquire) != uint32_t(RunState::kRunning);
}

// CAS FREE slot `index`, last seen as `seen`, to CLAIMED(self).
bool claim_if_free(Ring& ring, Identity self, uint32_t index, SlotState seen,
                   SlotClaim& out) noexcept {
  if (!seen.phase_valid() || seen.phase() != SlotPhase::kFree) return false;
  const SlotState claimed = seen.next(SlotPhase::kClaimed, self.index, self.epoch);
  // Acquire on success: the last consumer's reads of this payload (ordered before its
  // release CAS to FREE) happen before we start overwriting it.
  if (!transition_slot(ring, index, seen, claimed)) return false;
  out = SlotClaim{index, claimed};
  return true;
}

// The fast path: the FREE hints from `hint` on. A set bit whose slot is not FREE is
// stale (a race, or a crash after a CAS): dropped, and the search goes on.
bool claim_hinted_free(Ring& ring, Identity self, uint32_t hint, SlotClaim& out) noexcept {
  uint64_t bits[kHintWords];
  const uint32_t words = snapshot_hints(ring, SlotPhase::kFree, bits);
  const uint32_t start = hint % ring.slot_count();
  for (uint32_t step = 0; step <= words; ++step) {
    const uint32_t w = (start / 64 + step) % words;
    uint64_t mask = bits[w];
    // First word: from `hint` on; the wrap-around (step == words) takes the bits below it.
    if (step == 0) mask &= ~uint64_t(0) << (start % 64);
    if (step == words) mask &= ~(~uint64_t(0) << (start % 64));
    while (mask != 0) {
      const uint32_t index = w * 64 + uint32_t(__builtin_ctzll(mask));
      mask &= mask - 1;
      const SlotState seen(ring.slot(index).state.load(std::memory_order_relaxed));
      if (claim_if_free(ring, self, index, seen, out)) return true;
      if (!seen.phase_valid() || seen.phase() != SlotPhase::kFree)
        drop_stale_hint(ring, index, SlotPhase::kFree);
    }
  }
  return false;
}

// The slow path, taken only when no hint led to a FREE slot (the ring is full, or a dead
// actor left a FREE slot unhinted): one pass over every slot word, claiming the first FREE
// slot and restoring the hints of the others it meets (as the consumer's scan does for
// READY), so an unhinted FREE slot costs one slow attempt and is never missed.
ClaimResult try_claim_free(Ring& ring, Identity self, uint32_t hint) noexcept {
  SlotClaim claim;
  if (claim_hinted_free(ring, self, hint, claim)) return ClaimResult(claim);
  const uint32_t n = ring.slot_count();
  bool claimed = false;
  for (uint32_t step = 0; step < n; ++step) {
    const uint32_t index = (hint + step) % n;
    const SlotState seen(ring.slot(index).state.load(std::memory_order_relaxed));
    if (!seen.phase_valid() || seen.phase() != SlotPhase::kFree) continue;
    if (!claimed && claim_if_free(ring, self, index, seen, claim)) {
      claimed = true;
      continue;
    }
    restore_hint(ring, index, SlotPhase::kFree);
  }
  return claimed ? ClaimResult(claim) : ClaimResult::timed_out();
}

bool any_free(const Ring& ring) noexcept {
  for (uint32_t i = 0; i < ring.slot_count(); ++i) {
    if (SlotState(ring.slot(i).state.load(std::memory_order_relaxed)).phase() == SlotPhase::kFree)
      return true;
  }
  return false;
}

}  // namespace

ClaimResult claim_free_slot(Ring& ring, Identity self, uint32_t hint,
                            std::chrono::nanoseconds timeout) noexcept {
  uint64_t deadline = 0;  // taken on the first wait: the fast path reads no clock
  while (!stopping(ring)) {
    if (auto claim = try_claim_free(ring, self, hint)) return claim;
    const uint64_t now = monotonic_ns();
    if (deadline == 0) deadline = now + uint64_t(timeout.count());
    if (now >= deadline) return ClaimResult::timed_out();
    // Short waits so a stop request is noticed promptly even without a wake.
    const auto slice = std::chrono::nanoseconds(std::min<uint64_t>(deadline - now, 50'000'000));
    free_condition(ring).wait_until([&] { return any_free(ring) || stopping(ring); }, slice);
  }
  return ClaimResult::stopping();
}

SlotResult bind_batch(Ring& ring, SlotClaim& claim, uint64_t batch_id) noexcept {
  SlotHeader& slot = ring.slot(claim.index);
  if (claim.word.phase() != SlotPhase::kClaimed) return SlotResult(SlotStatus::kLost);
  // Release: a recoverer holding a stale READING word that reads this id must then see
  // our claim in the slot word (recovery.cc). The release CAS below orders it before the
  // WRITING word that certifies it to consumers.
  slot.batch_id.store(batch_id, std::memory_order_release);
  return SlotResult::ok_or_lost(advance_claim(
      ring, claim, claim.word.next(SlotPhase::kWriting, claim.word.owner(), claim.word.epoch())));
}

SlotResult adopt_orphaned_write(Ring& ring, SlotClaim& claim, Identity self) noexcept {
  if (claim.word.phase() != SlotPhase::kWriting) return SlotResult(SlotStatus::kLost);
  return SlotResult::ok_or_lost(
      advance_claim(ring, claim, claim.word.next(SlotPhase::kWriting, self.index, self.epoch)));
}

SlotResult publish(Ring& ring, SlotClaim& claim, const BatchInfo& info, const CopyEvent* early,
                   uint64_t* ticket) noexcept {
  SlotHeader& slot = ring.slot(claim.index);
  if (claim.word.phase() != SlotPhase::kWriting) return SlotResult(SlotStatus::kLost);
  const uint64_t seq = ring.header().publish_seq.fetch_add(1, std::memory_order_relaxed) + 1;
  slot.publish_seq.store(seq, std::memory_order_relaxed);
  slot.token_count.store(info.token_count, std::memory_order_relaxed);
  slot.num_docs.store(info.num_docs, std::memory_order_relaxed);
  slot.length_bucket.store(info.length_bucket, std::memory_order_relaxed);
  slot.producer.store(claim.word.owner(), std::memory_order_relaxed);
  slot.producer_epoch.store(claim.word.epoch(), std::memory_order_relaxed);
  if (early != nullptr) std::memcpy(slot.copy_event, early->handle, kCopyEventBytes);
  const uint64_t copy_ticket = make_copy_ticket(seq, early != nullptr);
  slot.copy_ticket.store(copy_ticket, std::memory_order_relaxed);
  if (ticket != nullptr) *ticket = copy_ticket;
  // SYNC POINT WRITE: payload and metadata. The release CAS to READY publishes them;
  // consumers claim with an acquire CAS (ring-protocol.md invariant 2).
  if (!advance_claim(ring, claim,
                     claim.word.next(SlotPhase::kReady, claim.word.owner(), claim.word.epoch()))) {
    return SlotResult(SlotStatus::kLost);
  }
  notify_slot_change(ring, SharedCondition(ring.header().ready_futex, ring.header().ready_waiters));
  // After the CAS: a mark before it could name a batch that a crash then never publishes.
  // A crash right here leaves the mark to the consumer (ledger_mark_consumed sets it too).
  ledger_mark_published(ring, info.batch_id);
  return SlotResult(SlotStatus::kOk);
}

SlotResult unclaim(Ring& ring, SlotClaim& claim) noexcept {
  if (claim.word.phase() != SlotPhase::kClaimed) return SlotResult(SlotStatus::kLost);
  if (!advance_claim(ring, claim, claim.word.next(SlotPhase::kFree, 0, 0)))
    return SlotResult(SlotStatus::kLost);
  notify_slot_change(ring, free_condition(ring));
  return SlotResult(SlotStatus::kOk);
}

}  // namespace hsring
