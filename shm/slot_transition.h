// The one way a slot changes hands: a CAS on its state word from an exact expected word.
// Shared by producers, consumers and recoverers so every transition orders the same way.
#pragma once

#include "common/clock.h"
#include "shm/ring_layout.h"
#include "shm/slot_claim.h"

namespace hsring {

// CAS `slot` from `from` to `to`. acq_rel on success: release publishes everything the
// actor wrote before (batch id, payload, metadata, consumed_word) to whoever acquires
// `to`; acquire makes the previous owner's writes (and reads) happen before ours.
inline bool transition_slot(SlotHeader& slot, SlotState from, SlotState to) noexcept {
  uint64_t expected = from.word();
  if (!slot.state.compare_exchange_strong(expected, to.word(), std::memory_order_acq_rel,
                                          std::memory_order_relaxed)) {
    return false;
  }
  slot.state_since_ns.store(coarse_monotonic_ns(), std::memory_order_relaxed);
  return true;
}

// transition_slot from the word `claim` holds; on success the claim holds `to`.
inline bool advance_claim(SlotHeader& slot, SlotClaim& claim, SlotState to) noexcept {
  if (!transition_slot(slot, claim.word, to)) return false;
  claim.word = to;
  return true;
}

}  // namespace hsring
