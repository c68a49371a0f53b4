// A training run's curves in its run folder: one record per optimizer step, as a line of
// RUN_DIR/metrics.jsonl (a JSON object) and as TensorBoard scalars in RUN_DIR/tensorboard/
// (event_file_writer.h), so `tensorboard --logdir hsring-runs` draws them. Written by the
// drafter that reports the run's progress (drafter 0 of node 0); docs/drafter-training.md,
// "In a run", lists the fields.
//
// Resume rule: each step appears once. A drafter that starts at step S (0 for a fresh
// run, else its checkpoint's step) drops the records of steps past S from metrics.jsonl
// (an earlier incarnation trained them before it died; they are trained again, with other
// values) and any cut last line, then rewrites the TensorBoard folder from what is left,
// so the event files agree with metrics.jsonl; then it appends.
//
// A failure to write (a full disk) never stops training: it is logged once as a warning,
// and the curves stop at the last step written. curves.png, the records drawn, is written
// when asked (write_plot: at checkpoints and at the end of a run).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "curves/append_file.h"
#include "curves/curves_plot.h"
#include "curves/event_file_writer.h"

namespace hsring::curves {

inline constexpr const char* kMetricsFile = "metrics.jsonl";
inline constexpr const char* kTensorboardFolder = "tensorboard";
inline constexpr const char* kPlotFile = "curves.png";

// The held-out evaluation after a step (--eval-every): drafter_proc/held_out_set.h.
struct HeldOutRecord {
  double loss = 0;
  double acceptance_length = 0;
  double agreement = 0;
};

// One optimizer step, as drafter 0 saw it.
struct StepRecord {
  uint64_t step = 0;             // updates applied, this one included
  double wall_time = 0;          // seconds since the Unix epoch, when the step ended
  double loss = 0;               // the objective's loss on drafter 0's batch, before the update
  double acceptance_length = 0;  // DFlash: teacher-forced tau on that batch (0: no drafting)
  double agreement = 0;          // top-1 agreement with the labels
  double lr = 0;
  double grad_norm = 0;     // the group's gradient, before clipping
  double step_ms = 0;       // drafter 0's step: forward, backward, all-reduce, update
  double tokens_per_s = 0;  // label positions trained by every drafter, per second of wall time
  // Fraction of the wall time since the previous record spent in each role's work (mean
  // over the ring's processes of that role); none when nothing was timed.
  std::optional<double> target_busy, drafter_busy;
  // DFlash: [B - 1], element k: the fraction of blocks whose positions 1 .. k+1 all matched
  // the labels (teacher-forced acceptance at each block position); empty otherwise.
  std::vector<double> position_acceptance;
  // Every --eval-every steps: the held-out batches at the weights after this step
  // (eval_loss, eval_acceptance_length, eval_agreement; tags eval/...).
  std::optional<HeldOutRecord> held_out;
};

class TrainingCurves {
 public:
  // The curves of `run_dir` for a drafter whose first step will be `start_step` + 1,
  // after applying the resume rule above. Never throws: a folder that cannot be written
  // gives curves that write nothing (logged once).
  static std::unique_ptr<TrainingCurves> open(const std::string& run_dir, uint64_t start_step);

  // Appends `record` to both files. Never throws (see above).
  void record(const StepRecord& record) noexcept;

  // Draws every record so far into RUN_DIR/curves.png (curves_plot.h), replacing it. Never
  // throws: a failure is logged once, and the plot is not tried again.
  void write_plot() noexcept;

  // False once a write failed: nothing more is written.
  bool writing() const { return metrics_ != nullptr; }
  // Steps dropped from an earlier incarnation's records by open().
  uint64_t dropped() const { return dropped_; }

 private:
  explicit TrainingCurves(std::string run_dir) : run_dir_(std::move(run_dir)) {}
  void fail(const std::string& what) noexcept;

  std::string run_dir_;
  std::unique_ptr<AppendFile> metrics_;
  std::unique_ptr<EventFileWriter> events_;
  uint64_t last_step_ = 0;
  uint64_t dropped_ = 0;
  std::vector<CurvePoint> points_;  // every record kept or appended, for the plot
  bool plot_failed_ = false;
};

}  // namespace hsring::curves
