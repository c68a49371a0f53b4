// Ordered claims (RingShape::ordered_claims, `hsring run --deterministic`): drafters
// consume batch ids in a fixed order instead of a random READY slot, so a run's data
// order, and with it the trained drafter, depends on its flags and seeds alone.
//
// Drafter r of N takes ids r, r + N, r + 2N, ... A drafter that waits for its next id
// must not wait forever because the slots are full of later ids, so targets bind an id
// only inside a window: id < ordered_floor + slot_count, where the floor is the oldest id
// not yet consumed. The ids bound or claimed are then distinct members of the window;
// at most slot_count - 1 of them are not the floor's, so its target always finds a slot.
// The floor is a throttle, not a safety property: a stale (lower) floor only makes a
// target wait a little longer, which is why its words are read and advanced relaxed.
#pragma once

#include <chrono>
#include <cstdint>

#include "shm/futex.h"
#include "shm/ring.h"

namespace hsring {

// Whether the ledger records `batch_id` as consumed (false past its capacity).
bool batch_consumed(const Ring& ring, uint64_t batch_id) noexcept;

// The first id of the sequence from, from + stride, ... that is not yet consumed: where a
// drafter (re)starts. REQUIRES: stride >= 1.
uint64_t next_unconsumed(const Ring& ring, uint64_t from, uint64_t stride) noexcept;

// Moves RingHeader::ordered_floor past every consumed id; racing callers are harmless
// (each CAS moves it one consumed id further). Returns the floor it left.
uint64_t advance_ordered_floor(Ring& ring) noexcept;

// Whether a target may bind `batch_id` now: always without ordered claims, else when it
// lies inside the window (advancing the floor first if it looks too low).
bool inside_ordered_window(Ring& ring, uint64_t batch_id) noexcept;

// Waits until inside_ordered_window(ring, batch_id), at most `timeout` (consumers advance
// the floor before they wake the free-slot waiters). Returns inside_ordered_window's last
// answer.
bool wait_for_ordered_window(Ring& ring, uint64_t batch_id,
                             std::chrono::nanoseconds timeout) noexcept;

// Wakes the waiters of `condition` after one slot changed phase: one of them, as the ring
// does, or every one under ordered claims, where each waits for its own batch id or window
// and a single wake could reach one whose wait it does not end.
void notify_slot_change(const Ring& ring, SharedCondition condition) noexcept;

}  // namespace hsring
