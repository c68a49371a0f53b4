// A seeded bijection of [0, n) evaluated one index at a time, without a table: a 4-round
// Feistel network on the smallest even bit width that covers n, cycle-walked back into
// [0, n). Lets any epoch's order be looked up in O(1) from a batch id alone.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "common/random.h"

namespace hsring::data {

// REQUIRES: index < n.
inline uint64_t permute_index(uint64_t index, uint64_t n, uint64_t key) {
  if (n <= 1) return 0;
  uint32_t bits = std::max<uint32_t>(2, uint32_t(std::bit_width(n - 1)));
  bits += bits & 1u;
  const uint32_t half = bits / 2;
  const uint64_t mask = (half == 64 ? ~0ull : (1ull << half) - 1);
  uint64_t x = index;
  // Each pass is a bijection of [0, 2^bits); repeating it from a value < n walks the
  // cycle until it is back below n, which keeps the whole map a bijection of [0, n).
  do {
    uint64_t left = x >> half;
    uint64_t right = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t f = mix64(right ^ mix64(key + round)) & mask;
      const uint64_t next_right = left ^ f;
      left = right;
      right = next_right;
    }
    x = (left << half) | right;
  } while (x >= n);
  return x;
}

}  // namespace hsring::data
