#include "curves/curves_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "common/text_file.h"
#include "curves/png_encoder.h"

namespace hsring::curves {
namespace {

constexpr Rgb kBackground{255, 255, 255};
constexpr Rgb kInk{40, 40, 40};
constexpr Rgb kGrid{225, 225, 225};

std::string label(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", v);
  return text;
}

struct Series {
  std::vector<std::pair<uint64_t, double>> train, held_out;
};

// One panel: frame, grid, value range labels, the training line and the held-out squares.
void draw_panel(Raster& canvas, const PanelArea& area, const char* title, const Series& series,
                uint64_t first, uint64_t last) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto* points : {&series.train, &series.held_out})
    for (const auto& [step, v] : *points) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  if (!(lo <= hi)) lo = 0, hi = 1;  // no finite value
  if (lo == hi) lo -= 0.5, hi += 0.5;
  const auto x_of = [&](uint64_t step) {
    if (first == last) return area.left;
    return area.left +
           int(std::floor(
               double(step - first) * double(area.right - area.left) / double(last - first) + 0.5));
  };
  const auto y_of = [&](double v) {
    return area.bottom -
           int(std::floor((v - lo) * double(area.bottom - area.top) / (hi - lo) + 0.5));
  };
  for (int i = 1; i < 4; ++i) {
    const int y = area.top + (area.bottom - area.top) * i / 4;
    canvas.line(area.left, y, area.right, y, kGrid);
  }
  canvas.line(area.left - 1, area.top - 1, area.right + 1, area.top - 1, kInk);
  canvas.line(area.left - 1, area.bottom + 1, area.right + 1, area.bottom + 1, kInk);
  canvas.line(area.left - 1, area.top - 1, area.left - 1, area.bottom + 1, kInk);
  canvas.line(area.right + 1, area.top - 1, area.right + 1, area.bottom + 1, kInk);
  canvas.text(area.left, area.top - 20, title, kInk, 3);
  const std::string top = label(hi), bottom = label(lo);
  canvas.text(area.left - 6 - Raster::text_width(top), area.top, top, kInk);
  canvas.text(area.left - 6 - Raster::text_width(bottom), area.bottom - 9, bottom, kInk);
  const std::string from = label(double(first)), to = "step " + label(double(last));
  canvas.text(area.left, area.bottom + 6, from, kInk);
  canvas.text(area.right - Raster::text_width(to), area.bottom + 6, to, kInk);

  for (size_t i = 1; i < series.train.size(); ++i)
    canvas.line(x_of(series.train[i - 1].first), y_of(series.train[i - 1].second),
                x_of(series.train[i].first), y_of(series.train[i].second), kTrainColor);
  if (series.train.size() == 1)
    canvas.set(x_of(series.train[0].first), y_of(series.train[0].second), kTrainColor);
  for (size_t i = 1; i < series.held_out.size(); ++i)
    canvas.line(x_of(series.held_out[i - 1].first), y_of(series.held_out[i - 1].second),
                x_of(series.held_out[i].first), y_of(series.held_out[i].second), kHeldOutColor);
  for (const auto& [step, v] : series.held_out) {
    const int x = x_of(step), y = y_of(v);
    canvas.fill(x - 2, y - 2, x + 2, y + 2, kHeldOutColor);
  }
}

void add(std::vector<std::pair<uint64_t, double>>& series, uint64_t step, double v) {
  if (std::isfinite(v)) series.emplace_back(step, v);
}

}  // namespace

Raster plot_curves(std::span<const CurvePoint> points) {
  Raster canvas(kPlotWidth, kPlotHeight, kBackground);
  Series loss, tau;
  for (const CurvePoint& p : points) {
    add(loss.train, p.step, p.loss);
    add(tau.train, p.step, p.acceptance_length);
    if (p.held_out_loss) add(loss.held_out, p.step, *p.held_out_loss);
    if (p.held_out_acceptance_length) add(tau.held_out, p.step, *p.held_out_acceptance_length);
  }
  const uint64_t first = points.empty() ? 0 : points.front().step;
  const uint64_t last = points.empty() ? 0 : points.back().step;
  draw_panel(canvas, kLossPanel, "loss", loss, first, last);
  draw_panel(canvas, kTauPanel, "tau", tau, first, last);
  // The legend, top right.
  const int x = kLossPanel.right - 150, y = 8;
  canvas.fill(x, y + 2, x + 14, y + 4, kTrainColor);
  canvas.text(x + 20, y, "train", kInk);
  canvas.fill(x + 75, y + 1, x + 79, y + 5, kHeldOutColor);
  canvas.text(x + 85, y, "held-out", kInk);
  return canvas;
}

void write_curves_png(const std::string& path, std::span<const CurvePoint> points) {
  const Raster canvas = plot_curves(points);
  write_file_atomically(path, encode_png_rgb(canvas.width(), canvas.height(), canvas.rgb()));
}

}  // namespace hsring::curves
