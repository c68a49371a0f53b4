// How many of a ring's slots are in each phase, read once from the live segment, for
// status, metrics and the launcher's progress line. A slot whose state word holds a phase
// that names no phase (5 to 7 in its 3 bits) is counted as corrupt and named, never used
// as an index.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shm/ring.h"

namespace hsring {

struct SlotCensus {
  uint32_t by_phase[kSlotPhaseCount] = {};
  uint32_t corrupt = 0;
  // One line per corrupt slot: "slot 3: phase 6 is not a valid phase: corrupt".
  std::vector<std::string> problems;
};

// Relaxed loads: a census is a snapshot for people, not a decision of the protocol.
SlotCensus take_slot_census(const Ring& ring);

}  // namespace hsring
