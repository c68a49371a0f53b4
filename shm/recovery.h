// Returning the slots of dead owners (ring-protocol.md invariant 5). Any process may recover at
// any time, concurrently with others: each step is a CAS on the slot word from the exact
// word that names the dead owner, so of two racing recoverers one wins and one no-ops.
//
//   CLAIMED(dead)  -> FREE       nothing was bound to it yet
//   READING(dead)  -> READY      unless the consumer had finished (consumed_word), then FREE
//   WRITING(dead)  stays         its batch id is bound; the target's successor adopts it
//                                and writes the same batch again (see producer.h)
#pragma once

#include <cstdint>
#include <vector>

#include "shm/ring.h"
#include "shm/slot_claim.h"

namespace hsring {

struct RecoveryStats {
  uint32_t freed = 0;        // CLAIMED -> FREE, or finished READING -> FREE
  uint32_t redelivered = 0;  // READING -> READY
  uint32_t orphaned = 0;     // WRITING of a dead target, left for its successor
  uint32_t hints = 0;        // FREE/READY hint bits a dead actor left wrong (slot_hints.h)
  uint32_t total() const { return freed + redelivered; }
};

// Recovers slot `index` as if its dead owner still held it with the word `seen`, read
// earlier and possibly stale: a slot that has moved on since is left alone. The scans below
// call it; tests call it with stale words.
void recover_slot_as_seen(Ring& ring, uint32_t index, SlotState seen, RecoveryStats& stats);

// True when process `index` is alive in incarnation `epoch` (low epoch bits compared).
bool owner_alive(const Ring& ring, uint32_t index, uint32_t epoch);

// Recovers every slot whose owner is dead, then repairs the claim hints (a dead actor
// may have died between a CAS and its hint update, owning nothing afterwards).
RecoveryStats recover_dead_owners(Ring& ring);

// Recovers the slots that process `self.index` held in epochs before `self.epoch`; the
// caller is that index's new incarnation, so those owners are dead by construction; then
// repairs the claim hints its predecessor may have left half updated.
RecoveryStats recover_previous_epochs(Ring& ring, Identity self);

// The WRITING slots that target `self.index` left in earlier epochs, each adopted by
// `self` (batch id kept). The caller writes those batches again before new ones.
std::vector<SlotClaim> adopt_previous_writes(Ring& ring, Identity self);

}  // namespace hsring
