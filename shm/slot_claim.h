// Who acts on the ring, and what a process holds after a successful claim.
#pragma once

#include <cstdint>

#include "shm/slot_state.h"

namespace hsring {

// A process incarnation: its index in the process table and the epoch of this start.
struct Identity {
  uint32_t index = 0;
  uint32_t epoch = 0;
};

// A slot held by the caller. `word` is the state word it installed; every later
// transition is a CAS from exactly this word, so it fails if anyone else moved the slot.
struct SlotClaim {
  uint32_t index = 0;
  SlotState word;
};

}  // namespace hsring
