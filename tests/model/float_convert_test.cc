#include "model/float_convert.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

namespace hsring {
namespace {

float from_bits(uint32_t bits) { return std::bit_cast<float>(bits); }

TEST(FloatConvertTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808000)), 0x3F80);              // tie, even below
  EXPECT_EQ(float_to_bf16(from_bits(0x3F818000)), 0x3F82);              // tie, odd below: up
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808001)), 0x3F81);              // above the tie
  EXPECT_EQ(float_to_bf16(from_bits(0x3F807FFF)), 0x3F80);              // below the tie
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to inf
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  const uint16_t nan = float_to_bf16(from_bits(0x7F800001));  // NaN whose payload is low bits
  EXPECT_TRUE(std::isnan(bf16_to_float(nan)));
  EXPECT_EQ(bf16_to_float(0x3FC0), 1.5f);
}

TEST(FloatConvertTest, Bf16RoundTripsEveryBf16Value) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bf16_to_float(uint16_t(b));
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_bf16(f), b);
  }
}

TEST(FloatConvertTest, Fp16HandValues) {
  EXPECT_EQ(float_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(float_to_fp16(-2.5f), 0xC100);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_fp16(65519.0f), 0x7BFF);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7C00);               // the tie above the max rounds to inf
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: zero
  EXPECT_EQ(float_to_fp16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(float_to_fp16(std::ldexp(3.0f, -25)), 0x0002);             // 1.5 units: tie to even 2
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie, even below
  EXPECT_EQ(float_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie, odd below
  EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(std::nanf("")))));
  EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_float(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp16_to_float(0x8000), -0.0f);
}

TEST(FloatConvertTest, Fp16RoundTripsEveryFp16Value) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = fp16_to_float(uint16_t(b));
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_fp16(f), b);
  }
}

}  // namespace
}  // namespace hsring
