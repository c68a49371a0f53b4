// curves.png: a run's loss (top panel) and teacher-forced tau (bottom panel) against the
// step, the training records as a line and the held-out evaluations (--eval-every) as
// squares, for people who only want to look. Drawn on a Raster, encoded by encode_png_rgb.
//
// Where a point lands (tests/reference/tensorboard_curves_test.py decodes the file and
// checks it): x = left + floor((step - first) * (right - left) / (last - first) + 0.5)
// over the records' steps [first, last] (x = left when first == last), and
// y = bottom - floor((v - lo) * (bottom - top) / (hi - lo) + 0.5), [lo, hi] the least and
// greatest finite value of the panel (training and held-out; [v - 0.5, v + 0.5] when all
// are v). A training point's pixel is kTrainColor (or kHeldOutColor where a square covers
// it); a held-out point's is kHeldOutColor, at the centre of its 5 x 5 square.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "curves/raster.h"

namespace hsring::curves {

inline constexpr uint32_t kPlotWidth = 800, kPlotHeight = 600;
struct PanelArea {
  int left, top, right, bottom;  // pixels, inclusive
};
inline constexpr PanelArea kLossPanel{70, 30, 779, 269};
inline constexpr PanelArea kTauPanel{70, 330, 779, 569};
inline constexpr Rgb kTrainColor{31, 119, 180};
inline constexpr Rgb kHeldOutColor{255, 127, 14};

struct CurvePoint {
  uint64_t step = 0;
  double loss = 0;
  double acceptance_length = 0;  // teacher-forced tau (0 for the same-position objective)
  std::optional<double> held_out_loss, held_out_acceptance_length;
};

// The plot of `points` (in step order). Nothing but the frame and titles when empty.
Raster plot_curves(std::span<const CurvePoint> points);

// plot_curves, encoded, written to `path` atomically (temporary file and rename). Throws
// Error on a failed write.
void write_curves_png(const std::string& path, std::span<const CurvePoint> points);

}  // namespace hsring::curves
