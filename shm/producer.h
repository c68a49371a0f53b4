// The producer side of the ring protocol: FREE -> CLAIMED -> WRITING -> READY.
//
// A target claims an empty slot, binds the batch id it will write (CLAIMED -> WRITING,
// the commit point of "this batch lives in this slot"), fills the payload, and publishes.
// Each step is a CAS from the word the previous step installed, so a producer whose slot
// was recovered (it was taken for dead) can never complete a transition: it gets kLost.
// Hot paths: noexcept, results typed (shm/slot_result.h).
#pragma once

#include <chrono>
#include <cstdint>

#include "shm/copy_ticket.h"
#include "shm/ring.h"
#include "shm/slot_claim.h"
#include "shm/slot_result.h"

namespace hsring {

// Metadata published with the payload.
struct BatchInfo {
  uint64_t batch_id = 0;
  uint32_t token_count = 0;
  uint32_t num_docs = 0;
  uint32_t length_bucket = 0;
};

// Claims a FREE slot for `self`, starting the search at `hint` (spreads producers over
// the ring). Waits up to `timeout` for one to become free: kTimedOut when none did,
// kStopping when the run no longer runs (draining or stopped: producers start no batch).
ClaimResult claim_free_slot(Ring& ring, Identity self, uint32_t hint,
                            std::chrono::nanoseconds timeout) noexcept;

// Binds `batch_id` to a CLAIMED slot: CLAIMED -> WRITING. From here on a crash of the
// producer leaves the batch id in the slot, for the producer's successor to write again.
// kLost when the claim was lost (the slot was recovered from us).
SlotResult bind_batch(Ring& ring, SlotClaim& claim, uint64_t batch_id) noexcept;

// Takes over a WRITING slot of one of our previous epochs (its batch id stays bound):
// WRITING(old epoch) -> WRITING(self). kLost when someone else moved it first.
SlotResult adopt_orphaned_write(Ring& ring, SlotClaim& claim, Identity self) noexcept;

// Publishes a filled slot: WRITING -> READY, after which consumers may read it.
// REQUIRES: the payload and `info` are completely in host memory (invariant 2), or
// `early` names the exported event recorded after the payload's copy (early publish,
// copy_ticket.h): `info` and the token metadata are in host memory, the layers follow.
// kLost when the slot was recovered from us. `ticket`, if given, receives the copy ticket
// stored (for settle_copy).
SlotResult publish(Ring& ring, SlotClaim& claim, const BatchInfo& info,
                   const CopyEvent* early = nullptr, uint64_t* ticket = nullptr) noexcept;

// Gives back a CLAIMED slot without binding a batch (e.g. at shutdown).
SlotResult unclaim(Ring& ring, SlotClaim& claim) noexcept;

}  // namespace hsring
