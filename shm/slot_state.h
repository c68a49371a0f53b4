// The slot state word: one 64-bit value that says who owns a slot and in which state.
// Every transition of a slot is a CAS on this word (ring-protocol.md invariant 1).
#pragma once

#include <cstdint>

namespace hsring {

enum class SlotPhase : uint8_t {
  kFree = 0,     // empty, may be claimed by a producer
  kClaimed = 1,  // a producer holds it but has not yet bound a batch id to it
  kWriting = 2,  // a producer is filling it; its batch id is bound (docs/ring-protocol.md)
  kReady = 3,    // complete payload, waiting for a consumer
  kReading = 4,  // a consumer (owner, epoch) is reading it
};
inline constexpr int kSlotPhaseCount = 5;

const char* to_string(SlotPhase phase);

// Bit layout, high to low:
//   [63:61] phase   [60:53] owner process index   [52:32] owner epoch (low 21 bits)
//   [31:0]  version, bumped by every transition.
// The version makes every word value unique over a slot's life, so a CAS by a stale
// owner (or on a word read before a recovery) always fails: no ABA.
class SlotState {
 public:
  static constexpr uint32_t kOwnerBits = 8;
  static constexpr uint32_t kEpochBits = 21;
  static constexpr uint32_t kMaxOwners = 1u << kOwnerBits;
  static constexpr uint32_t kEpochMask = (1u << kEpochBits) - 1;

  constexpr SlotState() = default;
  constexpr explicit SlotState(uint64_t word) : word_(word) {}
  static constexpr SlotState make(SlotPhase phase, uint32_t owner, uint32_t epoch,
                                  uint32_t version) {
    return SlotState((uint64_t(phase) << 61) | (uint64_t(owner & (kMaxOwners - 1)) << 53) |
                     (uint64_t(epoch & kEpochMask) << 32) | uint64_t(version));
  }

  constexpr uint64_t word() const { return word_; }
  // The 3 phase bits as stored: 0 to 7, of which only kSlotPhaseCount name a phase. A word
  // read from the segment may hold any of them (a co-tenant can write it).
  constexpr uint32_t phase_bits() const { return uint32_t(word_ >> 61); }
  constexpr bool phase_valid() const { return phase_bits() < uint32_t(kSlotPhaseCount); }
  // REQUIRES (for a value that names a phase): phase_valid().
  constexpr SlotPhase phase() const { return SlotPhase(word_ >> 61); }
  constexpr uint32_t owner() const { return uint32_t(word_ >> 53) & (kMaxOwners - 1); }
  constexpr uint32_t epoch() const { return uint32_t(word_ >> 32) & kEpochMask; }
  constexpr uint32_t version() const { return uint32_t(word_); }

  // The word after a transition to `phase` by (owner, epoch); the version moves on.
  constexpr SlotState next(SlotPhase phase, uint32_t owner, uint32_t epoch) const {
    return make(phase, owner, epoch, version() + 1);
  }
  // True for the phases in which a live process owns the slot.
  constexpr bool owned() const {
    return phase() == SlotPhase::kClaimed || phase() == SlotPhase::kWriting ||
           phase() == SlotPhase::kReading;
  }
  // True when this word is owned by (owner, epoch); epochs compare in their stored bits.
  constexpr bool held_by(uint32_t owner_index, uint32_t owner_epoch) const {
    return owned() && owner() == owner_index && epoch() == (owner_epoch & kEpochMask);
  }

  friend constexpr bool operator==(SlotState a, SlotState b) { return a.word_ == b.word_; }

 private:
  uint64_t word_ = 0;
};

}  // namespace hsring
