#include "curves/pixel_font.h"

namespace hsring::curves {

std::array<uint8_t, kGlyphHeight> glyph(char c) {
  switch (c) {
    case '0':
      return {7, 5, 5, 5, 7};
    case '1':
      return {2, 6, 2, 2, 7};
    case '2':
      return {7, 1, 7, 4, 7};
    case '3':
      return {7, 1, 7, 1, 7};
    case '4':
      return {5, 5, 7, 1, 1};
    case '5':
      return {7, 4, 7, 1, 7};
    case '6':
      return {7, 4, 7, 5, 7};
    case '7':
      return {7, 1, 1, 1, 1};
    case '8':
      return {7, 5, 7, 5, 7};
    case '9':
      return {7, 5, 7, 1, 7};
    case '.':
      return {0, 0, 0, 0, 2};
    case '-':
      return {0, 0, 7, 0, 0};
    case '+':
      return {0, 2, 7, 2, 0};
    case 'a':
      return {0, 6, 1, 7, 7};
    case 'c':
      return {0, 7, 4, 4, 7};
    case 'd':
      return {1, 7, 5, 5, 7};
    case 'e':
      return {0, 7, 7, 4, 7};
    case 'h':
      return {4, 4, 7, 5, 5};
    case 'i':
      return {2, 0, 2, 2, 2};
    case 'l':
      return {6, 2, 2, 2, 7};
    case 'n':
      return {0, 6, 5, 5, 5};
    case 'o':
      return {0, 7, 5, 5, 7};
    case 'p':
      return {0, 7, 5, 7, 4};
    case 'r':
      return {0, 7, 4, 4, 4};
    case 's':
      return {0, 7, 6, 1, 7};
    case 't':
      return {2, 7, 2, 2, 3};
    case 'u':
      return {0, 5, 5, 5, 7};
    case 'v':
      return {0, 5, 5, 5, 2};
    default:
      return {0, 0, 0, 0, 0};
  }
}

}  // namespace hsring::curves
