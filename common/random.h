// Small counter-based and stateful generators: deterministic, seedable, shareable.
#pragma once

#include <cstdint>

namespace hsring {

// SplitMix64: advances `state` and returns the next value.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A stateless 64-bit mix of one value: the same input always gives the same output.
inline uint64_t mix64(uint64_t value) {
  uint64_t state = value;
  return splitmix64(state);
}

}  // namespace hsring
