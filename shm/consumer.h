// The consumer side of the ring protocol: READY -> READING -> FREE.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "shm/ring.h"
#include "shm/slot_claim.h"

namespace hsring {

// Counts READY slots (a snapshot; other processes move slots meanwhile).
uint32_t count_ready(const Ring& ring);

// Waits until at least `min_ready` slots are READY (one suffices while the ring drains),
// then claims a uniformly random one for `self`: READY -> READING. `rng_state` is the
// caller's generator state. nullopt on timeout.
std::optional<SlotClaim> claim_ready_slot(Ring& ring, Identity self, uint32_t min_ready,
                                          std::chrono::nanoseconds timeout, uint64_t& rng_state);

// Records that the batch in the slot was consumed, then frees the slot: READING -> FREE.
// False when the claim was lost (we were taken for dead and the slot recovered).
[[nodiscard]] bool release_consumed(Ring& ring, SlotClaim& claim);

// Puts a claimed slot back unread: READING -> READY (a consumer that stops early).
[[nodiscard]] bool return_unread(Ring& ring, SlotClaim& claim);

}  // namespace hsring
