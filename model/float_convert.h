// Conversions between fp32 and the 16-bit float formats of weights (bf16, fp16 in
// safetensors) and of the ring (bf16 by default). Narrowing rounds to nearest, ties to
// even, as torch's .to(bfloat16) does, so CPU-written slots match what a GPU target writes.
#pragma once

#include <bit>
#include <cstdint>

namespace hsring {

inline float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(uint32_t(bits) << 16); }

inline uint16_t float_to_bf16(float value) {
  const uint32_t u = std::bit_cast<uint32_t>(value);
  // NaN: keep sign and top payload bits, force quiet; rounding could turn it into inf.
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x0040u);
  // Adding 0x7FFF plus the lowest kept bit rounds half to even; overflow lands on inf.
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

inline float fp16_to_float(uint16_t bits) {
  const uint32_t sign = uint32_t(bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1Fu;
  uint32_t mant = bits & 0x3FFu;
  if (exp == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));  // inf, NaN
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return std::bit_cast<float>(sign);
  // Subnormal half: normalise the mantissa into a normal float.
  uint32_t e = 113;
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return std::bit_cast<float>(sign | (e << 23) | ((mant & 0x3FFu) << 13));
}

inline uint16_t float_to_fp16(float value) {
  const uint32_t u = std::bit_cast<uint32_t>(value);
  const auto sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return uint16_t(sign | 0x7E00u | ((a >> 13) & 0x3FFu));  // quiet NaN
  if (a >= 0x477FF000u) return uint16_t(sign | 0x7C00u);  // >= 65520 rounds to inf
  const uint32_t exp = a >> 23;
  if (exp < 113) {
    // Below the smallest normal half: count units of 2^-24, rounding half to even.
    if (exp < 102) return sign;  // under 2^-25: rounds to zero
    const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14..24
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return uint16_t(sign | q);  // q == 0x400 encodes the smallest normal, as it should
  }
  uint32_t h = ((exp - 112) << 10) | ((a >> 13) & 0x3FFu);
  const uint32_t rem = a & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent
  return uint16_t(sign | h);
}

}  // namespace hsring
