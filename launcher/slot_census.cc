#include "launcher/slot_census.h"

#include <fmt/format.h>

namespace hsring {

SlotCensus take_slot_census(const Ring& ring) {
  SlotCensus census;
  for (uint32_t i = 0; i < ring.slot_count(); ++i) {
    const SlotState state(ring.slot(i).state.load(std::memory_order_relaxed));
    if (!state.phase_valid()) {
      ++census.corrupt;
      census.problems.push_back(
          fmt::format("slot {}: phase {} is not a valid phase: corrupt", i, state.phase_bits()));
      continue;
    }
    ++census.by_phase[state.phase_bits()];
  }
  return census;
}

}  // namespace hsring
