// The consumer side of the ring protocol: READY -> READING -> FREE. Hot paths: noexcept,
// results typed (shm/slot_result.h).
#pragma once

#include <chrono>
#include <cstdint>

#include "shm/ring.h"
#include "shm/slot_claim.h"
#include "shm/slot_result.h"

namespace hsring {

// Counts READY slots (a snapshot; other processes move slots meanwhile).
uint32_t count_ready(const Ring& ring) noexcept;

// Waits until at least `min_ready` slots are READY (one suffices while the ring drains),
// then claims a uniformly random one for `self`: READY -> READING. `rng_state` is the
// caller's generator state. kTimedOut when none could be claimed within `timeout`;
// kStopping, instead of waiting, when none can be claimed and the run has stopped (no
// batch will arrive). A draining ring still hands out what is READY.
ClaimResult claim_ready_slot(Ring& ring, Identity self, uint32_t min_ready,
                             std::chrono::nanoseconds timeout, uint64_t& rng_state) noexcept;

// Ordered claims (shm/ordered_claims.h): waits until the slot holding `batch_id` is READY
// and claims it for `self`. While the run drains (the id may never be produced), claims
// the READY slot of the smallest batch id instead. kTimedOut and kStopping as
// claim_ready_slot.
ClaimResult claim_batch_in_order(Ring& ring, Identity self, uint64_t batch_id,
                                 std::chrono::nanoseconds timeout) noexcept;

// Records that the batch in the slot was consumed, then frees the slot: READING -> FREE.
// kLost when the claim was lost (we were taken for dead and the slot recovered).
SlotResult release_consumed(Ring& ring, SlotClaim& claim) noexcept;

// Puts a claimed slot back unread: READING -> READY (a consumer that stops early).
// kLost as release_consumed.
SlotResult return_unread(Ring& ring, SlotClaim& claim) noexcept;

}  // namespace hsring
