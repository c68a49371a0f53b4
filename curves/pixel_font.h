// A 3x5 pixel font for a plot's labels: digits, '.', '-', '+' and the lowercase letters
// the labels use. Other characters draw as blanks.
#pragma once

#include <array>
#include <cstdint>

namespace hsring::curves {

inline constexpr int kGlyphWidth = 3, kGlyphHeight = 5;

// Row r (0: top) of `c`'s glyph: bit 2 is the left column, bit 0 the right.
std::array<uint8_t, kGlyphHeight> glyph(char c);

}  // namespace hsring::curves
