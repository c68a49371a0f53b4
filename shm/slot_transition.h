// The one way a slot changes hands: a CAS on its state word from an exact expected word,
// followed by the update of the FREE/READY hints (slot_hints.h).
// Shared by producers, consumers and recoverers so every transition orders the same way.
#pragma once

#include "common/clock.h"
#include "shm/ring.h"
#include "shm/slot_claim.h"
#include "shm/slot_hints.h"

namespace hsring {

// CAS slot `index` from `from` to `to`. seq_cst on success (the same lock cmpxchg as
// acq_rel on x86): release publishes everything the actor wrote before (batch id,
// payload, metadata, consumed_word) to whoever acquires `to`; acquire makes the previous
// owner's writes (and reads) happen before ours; the single total order lets
// drop_stale_hint's re-check see this CAS or be followed by our bit update.
// A crash between the CAS and hint_transition leaves a stale hint: slot_hints.h.
inline bool transition_slot(Ring& ring, uint32_t index, SlotState from, SlotState to) noexcept {
  SlotHeader& slot = ring.slot(index);
  uint64_t expected = from.word();
  if (!slot.state.compare_exchange_strong(expected, to.word(), std::memory_order_seq_cst,
                                          std::memory_order_relaxed)) {
    return false;
  }
  slot.state_since_ns.store(coarse_monotonic_ns(), std::memory_order_relaxed);
  // A word that names no phase (written by a co-tenant) had no hint to drop.
  hint_transition(ring, index, from.phase_valid() ? from.phase() : SlotPhase::kClaimed, to.phase());
  return true;
}

// transition_slot from the word `claim` holds; on success the claim holds `to`.
inline bool advance_claim(Ring& ring, SlotClaim& claim, SlotState to) noexcept {
  if (!transition_slot(ring, claim.index, claim.word, to)) return false;
  claim.word = to;
  return true;
}

}  // namespace hsring
