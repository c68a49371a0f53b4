// An RGB canvas with the few drawing operations a line plot needs: pixels, lines, filled
// rectangles and text in the 3x5 pixel font. Coordinates outside the canvas are clipped.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace hsring::curves {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

class Raster {
 public:
  // REQUIRES: width, height > 0.
  Raster(uint32_t width, uint32_t height, Rgb background);

  uint32_t width() const { return width_; }
  uint32_t height() const { return height_; }
  // Row after row, three bytes a pixel (encode_png_rgb's input).
  std::span<const uint8_t> rgb() const { return pixels_; }
  Rgb at(int x, int y) const;  // REQUIRES: inside

  void set(int x, int y, Rgb color);
  // Every pixel of the segment, ends included (Bresenham).
  void line(int x0, int y0, int x1, int y1, Rgb color);
  // The rectangle with corners (x0, y0) and (x1, y1), both included.
  void fill(int x0, int y0, int x1, int y1, Rgb color);
  // `text` with its top-left corner at (x, y), each font pixel `scale` x `scale` pixels
  // and one font column between characters.
  void text(int x, int y, std::string_view text, Rgb color, int scale = 2);
  // The width text() draws `text` in.
  static int text_width(std::string_view text, int scale = 2);

 private:
  uint32_t width_, height_;
  std::vector<uint8_t> pixels_;
};

}  // namespace hsring::curves
