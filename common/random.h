// Small counter-based and stateful generators: deterministic, seedable, shareable.
#pragma once

#include <cstdint>
#include <string_view>

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

// The key of a named tensor's random stream under `seed`: FNV-1a of the name, mixed with
// the seed, so a tensor's values depend on its name alone, not on the tensors beside it.
inline uint64_t name_key(uint64_t seed, std::string_view name) {
  uint64_t hash = 0xCBF29CE484222325ull;
  for (unsigned char c : name) hash = (hash ^ c) * 0x100000001B3ull;
  return mix64(seed ^ hash);
}

// The top 24 bits of `bits` as a value in [-1, 1): exact in fp32, the same on every machine.
inline float signed_unit(uint64_t bits) {
  return float(int64_t(bits >> 40) - (1 << 23)) / float(1 << 23);
}

}  // namespace hsring
