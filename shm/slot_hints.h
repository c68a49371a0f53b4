// Hint bitmaps of the FREE and READY slots, kept beside the slot state words so a claim
// finds a candidate in O(slots / 64) word loads (one word for rings of up to 64 slots)
// instead of loading every slot header. The state word stays the only truth: a bit is a
// hint that may be stale after a crash between a CAS and its bit update, and every claim
// confirms it with the CAS. docs/ring-protocol.md, "Claim hints", has the invariant.
#pragma once

#include <atomic>
#include <cstdint>

#include "shm/slot_state.h"

namespace hsring {

class Ring;

inline constexpr uint32_t kHintWords = 4096 / 64;  // kMaxSlots bits

// One bit per slot; lives in RingHeader. Zero pages are "no hint", which the creator
// replaces with all slots FREE.
struct alignas(64) SlotHintBits {
  std::atomic<uint64_t> words[kHintWords];
};

// The bitmap that hints `phase`, or null for a phase without hints (owned phases).
SlotHintBits* hint_bits(Ring& ring, SlotPhase phase) noexcept;

// After a successful CAS of slot `index` from `from` to `to` by a live actor: drop the
// hint of `from`, add the hint of `to`. Every transition_slot calls it.
void hint_transition(Ring& ring, uint32_t index, SlotPhase from, SlotPhase to) noexcept;

// A claimer found the hint of `phase` set on a slot whose word is in another phase:
// clear it, then re-check the word and restore the bit if the slot entered `phase`
// meanwhile, so a clear never erases a hint set by a concurrent transition.
void drop_stale_hint(Ring& ring, uint32_t index, SlotPhase phase) noexcept;

// Sets the hint of `phase` on slot `index`, found in that phase by a scan of the words
// (a dead actor left it unset). A relaxed peek first: the bit is usually set already.
void restore_hint(Ring& ring, uint32_t index, SlotPhase phase) noexcept;

// Make every bit agree with its slot's word (one pass over the slots): the repair of
// hints a dead actor left half updated. Returns the bits it had to change.
uint32_t repair_hints(Ring& ring) noexcept;

// Copy of the `phase` bitmap's words covering the ring's slots; returns the word count.
uint32_t snapshot_hints(Ring& ring, SlotPhase phase, uint64_t* out) noexcept;

}  // namespace hsring
