// curves.png's pieces in every build flavour (the sanitizers watch the raster's writes):
// the PNG's chunks and rows read back through zlib, lines and clipping on the raster, and
// the plot's points where curves_plot.h says they land. A real run's file is decoded by
// Pillow in tests/reference/tensorboard_curves_test.py.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <string>
#include <vector>

#include "curves/curves_plot.h"
#include "curves/png_encoder.h"
#include "curves/raster.h"

namespace hsring::curves {
namespace {

uint32_t be32(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 |
         uint32_t(uint8_t(s[at + 2])) << 8 | uint32_t(uint8_t(s[at + 3]));
}

TEST(PngEncoderTest, ChunksCarryTheirCrcAndTheRowsInflateToThePixels) {
  Raster image(5, 3, {10, 20, 30});
  image.set(4, 2, {255, 0, 1});
  const std::string png = encode_png_rgb(image.width(), image.height(), image.rgb());
  ASSERT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  std::vector<std::string> types;
  std::string idat;
  for (size_t at = 8; at < png.size();) {
    const uint32_t length = be32(png, at);
    const std::string type = png.substr(at + 4, 4), body = png.substr(at + 8, length);
    const uLong crc = ::crc32(0, reinterpret_cast<const Bytef*>(png.data() + at + 4), length + 4);
    EXPECT_EQ(be32(png, at + 8 + length), uint32_t(crc)) << type;
    if (type == "IHDR") {
      EXPECT_EQ(be32(body, 0), 5u);
      EXPECT_EQ(be32(body, 4), 3u);
      EXPECT_EQ(body.substr(8), std::string("\x08\x02\x00\x00\x00", 5));
    }
    if (type == "IDAT") idat += body;
    types.push_back(type);
    at += 12 + length;
  }
  EXPECT_EQ(types, (std::vector<std::string>{"IHDR", "IDAT", "IEND"}));
  std::vector<uint8_t> rows(3 * (1 + 5 * 3));
  uLongf size = uLongf(rows.size());
  ASSERT_EQ(::uncompress(rows.data(), &size, reinterpret_cast<const Bytef*>(idat.data()),
                         uLong(idat.size())),
            Z_OK);
  ASSERT_EQ(size, rows.size());
  for (size_t y = 0; y < 3; ++y) {
    EXPECT_EQ(rows[y * 16], 0) << "row " << y << "'s filter";
    for (size_t x = 0; x < 5; ++x) {
      const Rgb want = y == 2 && x == 4 ? Rgb{255, 0, 1} : Rgb{10, 20, 30};
      const uint8_t* p = &rows[y * 16 + 1 + x * 3];
      EXPECT_EQ((Rgb{p[0], p[1], p[2]}), want) << x << "," << y;
    }
  }
}

TEST(RasterTest, LinesReachBothEndsAndNothingIsDrawnOutside) {
  Raster r(20, 10, {0, 0, 0});
  const Rgb ink{1, 2, 3};
  r.line(-5, -5, 25, 15, ink);  // clipped at every edge
  r.line(3, 8, 17, 1, ink);
  EXPECT_EQ(r.at(3, 8), ink);
  EXPECT_EQ(r.at(17, 1), ink);
  r.fill(18, 8, 40, 40, ink);
  EXPECT_EQ(r.at(19, 9), ink);
  r.text(-3, -2, "0.5 loss", ink);
  EXPECT_EQ(r.rgb().size(), 20u * 10 * 3);
}

TEST(CurvesPlotTest, PointsLandWhereTheHeaderSays) {
  std::vector<CurvePoint> points;
  for (uint64_t step = 1; step <= 9; ++step)
    points.push_back(
        {step, 10.0 / double(step), 1 + 0.1 * double(step), std::nullopt, std::nullopt});
  points[2].held_out_loss = 2.0;  // step 3
  points[2].held_out_acceptance_length = 1.2;
  const Raster plot = plot_curves(points);
  ASSERT_EQ(plot.width(), kPlotWidth);
  ASSERT_EQ(plot.height(), kPlotHeight);
  const auto x_of = [](uint64_t step) {
    return kLossPanel.left +
           int(std::floor(double(step - 1) * double(kLossPanel.right - kLossPanel.left) / 8 + 0.5));
  };
  const auto y_of = [](const PanelArea& a, double v, double lo, double hi) {
    return a.bottom - int(std::floor((v - lo) * double(a.bottom - a.top) / (hi - lo) + 0.5));
  };
  for (const CurvePoint& p : points) {
    const Rgb loss = plot.at(x_of(p.step), y_of(kLossPanel, p.loss, 10.0 / 9, 10.0));
    const Rgb tau = plot.at(x_of(p.step), y_of(kTauPanel, p.acceptance_length, 1.1, 1.9));
    EXPECT_TRUE(loss == kTrainColor || loss == kHeldOutColor) << p.step;
    EXPECT_TRUE(tau == kTrainColor || tau == kHeldOutColor) << p.step;
  }
  EXPECT_EQ(plot.at(x_of(3), y_of(kLossPanel, 2.0, 10.0 / 9, 10.0)), kHeldOutColor);
  EXPECT_EQ(plot.at(x_of(3), y_of(kTauPanel, 1.2, 1.1, 1.9)), kHeldOutColor);
  // No points: the frame alone, no throw.
  EXPECT_EQ(plot_curves({}).width(), kPlotWidth);
}

}  // namespace
}  // namespace hsring::curves
