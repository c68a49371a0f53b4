#include "curves/raster.h"

#include <algorithm>
#include <cstdlib>

#include "common/contract.h"
#include "curves/pixel_font.h"

namespace hsring::curves {

Raster::Raster(uint32_t width, uint32_t height, Rgb background)
    : width_(width), height_(height), pixels_(size_t(width) * height * 3) {
  HSRING_REQUIRE(width > 0 && height > 0);
  for (size_t i = 0; i < pixels_.size(); i += 3) {
    pixels_[i] = background.r;
    pixels_[i + 1] = background.g;
    pixels_[i + 2] = background.b;
  }
}

Rgb Raster::at(int x, int y) const {
  HSRING_REQUIRE(x >= 0 && y >= 0 && uint32_t(x) < width_ && uint32_t(y) < height_);
  const size_t i = (size_t(y) * width_ + size_t(x)) * 3;
  return {pixels_[i], pixels_[i + 1], pixels_[i + 2]};
}

void Raster::set(int x, int y, Rgb color) {
  if (x < 0 || y < 0 || uint32_t(x) >= width_ || uint32_t(y) >= height_) return;
  const size_t i = (size_t(y) * width_ + size_t(x)) * 3;
  pixels_[i] = color.r;
  pixels_[i + 1] = color.g;
  pixels_[i + 2] = color.b;
}

void Raster::line(int x0, int y0, int x1, int y1, Rgb color) {
  const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
  const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
  int error = dx + dy;
  for (;;) {
    set(x0, y0, color);
    if (x0 == x1 && y0 == y1) return;
    const int twice = 2 * error;
    if (twice >= dy) {
      error += dy;
      x0 += sx;
    }
    if (twice <= dx) {
      error += dx;
      y0 += sy;
    }
  }
}

void Raster::fill(int x0, int y0, int x1, int y1, Rgb color) {
  for (int y = std::min(y0, y1); y <= std::max(y0, y1); ++y)
    for (int x = std::min(x0, x1); x <= std::max(x0, x1); ++x) set(x, y, color);
}

void Raster::text(int x, int y, std::string_view text, Rgb color, int scale) {
  for (const char c : text) {
    const auto rows = glyph(c);
    for (int r = 0; r < kGlyphHeight; ++r)
      for (int col = 0; col < kGlyphWidth; ++col)
        if (rows[size_t(r)] & (4 >> col))
          fill(x + col * scale, y + r * scale, x + (col + 1) * scale - 1, y + (r + 1) * scale - 1,
               color);
    x += (kGlyphWidth + 1) * scale;
  }
}

int Raster::text_width(std::string_view text, int scale) {
  return text.empty() ? 0 : int(text.size()) * (kGlyphWidth + 1) * scale - scale;
}

}  // namespace hsring::curves
