// The producer side of the ring protocol: FREE -> CLAIMED -> WRITING -> READY.
//
// A target claims an empty slot, binds the batch id it will write (CLAIMED -> WRITING,
// the commit point of "this batch lives in this slot"), fills the payload, and publishes.
// Each step is a CAS from the word the previous step installed, so a producer whose slot
// was recovered (it was taken for dead) can never complete a transition.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "shm/ring.h"
#include "shm/slot_claim.h"

namespace hsring {

// Metadata published with the payload.
struct BatchInfo {
  uint64_t batch_id = 0;
  uint32_t token_count = 0;
  uint32_t num_docs = 0;
  uint32_t length_bucket = 0;
};

// Claims a FREE slot for `self`, starting the search at `hint` (spreads producers over
// the ring). Waits up to `timeout` for one to become free; nullopt on timeout or when the
// run is stopping.
std::optional<SlotClaim> claim_free_slot(Ring& ring, Identity self, uint32_t hint,
                                         std::chrono::nanoseconds timeout);

// Binds `batch_id` to a CLAIMED slot: CLAIMED -> WRITING. From here on a crash of the
// producer leaves the batch id in the slot, for the producer's successor to write again.
// False when the claim was lost (the slot was recovered from us).
[[nodiscard]] bool bind_batch(Ring& ring, SlotClaim& claim, uint64_t batch_id);

// Takes over a WRITING slot of one of our previous epochs (its batch id stays bound):
// WRITING(old epoch) -> WRITING(self). False when someone else moved it first.
[[nodiscard]] bool adopt_orphaned_write(Ring& ring, SlotClaim& claim, Identity self);

// Publishes a filled slot: WRITING -> READY, after which consumers may read it.
// REQUIRES: the payload and `info` are completely in host memory (invariant 2).
[[nodiscard]] bool publish(Ring& ring, SlotClaim& claim, const BatchInfo& info);

// Gives back a CLAIMED slot without binding a batch (e.g. at shutdown).
[[nodiscard]] bool unclaim(Ring& ring, SlotClaim& claim);

}  // namespace hsring
