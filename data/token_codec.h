// Decoding stored tokens (uint8, uint16 or uint32, little-endian) into int32 ids with a
// vocabulary check. The width is a template parameter so each loop compiles to plain
// loads: a memcpy of a run-time width per token costs a library call each.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace hsring::data {

template <uint32_t kWidth>
inline uint32_t load_token(const std::byte* at) {
  if constexpr (kWidth == 1) {
    return uint32_t(static_cast<uint8_t>(*at));
  } else if constexpr (kWidth == 2) {
    uint16_t v;
    std::memcpy(&v, at, 2);
    return v;
  } else {
    uint32_t v;
    std::memcpy(&v, at, 4);
    return v;
  }
}

// Decodes `count` tokens of `raw` into `out` and returns `count`, or stops at the first
// token above `max_token` and returns its index.
template <uint32_t kWidth>
size_t decode_tokens(const std::byte* raw, size_t count, uint64_t max_token, int32_t* out) {
  for (size_t i = 0; i < count; ++i) {
    const uint32_t token = load_token<kWidth>(raw + i * kWidth);
    if (token > max_token) return i;
    out[i] = int32_t(token);
  }
  return count;
}

// The index of the first of `count` tokens above `max_token`, or `count` if none is.
template <uint32_t kWidth>
size_t find_bad_token(const std::byte* raw, size_t count, uint64_t max_token) {
  uint32_t worst = 0;  // branch-free scan first: bad tokens are rare
  for (size_t i = 0; i < count; ++i) worst = std::max(worst, load_token<kWidth>(raw + i * kWidth));
  if (worst <= max_token) return count;
  for (size_t i = 0; i < count; ++i)
    if (load_token<kWidth>(raw + i * kWidth) > max_token) return i;
  return count;
}

// Run-time width dispatch; `width` is 1, 2 or 4.
inline size_t decode_tokens(uint32_t width, const std::byte* raw, size_t count, uint64_t max_token,
                            int32_t* out) {
  if (width == 1) return decode_tokens<1>(raw, count, max_token, out);
  if (width == 2) return decode_tokens<2>(raw, count, max_token, out);
  return decode_tokens<4>(raw, count, max_token, out);
}

inline size_t find_bad_token(uint32_t width, const std::byte* raw, size_t count,
                             uint64_t max_token) {
  if (width == 1) return find_bad_token<1>(raw, count, max_token);
  if (width == 2) return find_bad_token<2>(raw, count, max_token);
  return find_bad_token<4>(raw, count, max_token);
}

}  // namespace hsring::data
