// Payload throughput through an hsring ring: slots of captured layers written by one
// process (memcpy in) and copied out by another, against a plain single-thread memcpy of
// the same bytes in the same run.
#pragma once

#include <cstdint>

namespace hsring::bench {

inline constexpr uint32_t kPayloadHidden = 4096;
inline constexpr uint32_t kPayloadLayers = 2;
inline constexpr uint32_t kPayloadRingSlots = 4;

struct PayloadResult {
  uint64_t slot_bytes = 0;  // captured-layer bytes of one slot: what one transfer moves
  double ring_gbps = 0;     // 1e9 bytes per second delivered to the consumer
  double memcpy_gbps = 0;
};

// Moves `slots_moved` slots of `max_tokens` tokens x kPayloadHidden x kPayloadLayers bf16
// through a kPayloadRingSlots-slot ring, one producer and one consumer process, then times
// the memcpy baseline. Throws std::runtime_error or Error.
PayloadResult measure_payload(uint32_t slots_moved, uint32_t max_tokens);

}  // namespace hsring::bench
