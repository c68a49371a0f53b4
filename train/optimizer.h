// AdamW over the drafter's flat parameter buffer, with global-norm gradient clipping and a
// linear-warmup + cosine learning-rate schedule. The whole optimizer state is two flat
// buffers shaped like the parameters and one step count, so a checkpoint of those three
// resumes bit-exactly.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "train/adamw_step.h"
#include "train/param_layout.h"

namespace hsring::train {

struct LrSchedule {
  double peak_lr = 3e-4;
  double min_lr = 3e-5;
  uint64_t warmup_steps = 0;
  // The cosine reaches min_lr here. REQUIRES 0 or >= warmup_steps; 0: no decay, peak_lr
  // from the end of warmup on.
  uint64_t total_steps = 0;

  // The rate of update `step` (0-based): peak * (step + 1) / warmup while step < warmup,
  // then min + (peak - min) * (1 + cos(pi * (step - warmup) / (total - warmup))) / 2, and
  // min from `total` on. A pure function of step: a resumed run follows the same curve.
  double lr(uint64_t step) const;
};

struct AdamWOptions {
  LrSchedule schedule;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  // Decoupled (p -= lr * weight_decay * p), only on tensors whose ParamInfo::weight_decay is
  // set: never on norm weights.
  double weight_decay = 0.01;
  double max_grad_norm = 1.0;  // clip the gradient's global L2 norm to this; <= 0: never
};

// "" when usable, else the first problem (betas outside [0, 1), negative rates, ...).
std::string validate_adamw_options(const AdamWOptions& options);

struct UpdateStats {
  double grad_norm = 0;  // global L2 norm of the gradient, before clipping
  double lr = 0;         // the rate applied (0 when skipped)
  uint64_t step = 0;     // updates applied so far, this one included
  bool clipped = false;  // the gradient was scaled down to max_grad_norm
  bool skipped = false;  // the gradient was not finite: nothing changed, step not advanced
};

// sqrt(sum of squares), summed in double in index order (the same bits on every run).
double global_norm(std::span<const float> values);

// Scales `grads` in place so that their global norm is at most max_norm (no-op when
// max_norm <= 0 or the norm is not finite); returns the norm before scaling.
double clip_global_norm(std::span<float> grads, double max_norm);

// Thread safety: none; one update at a time, by the owner of the parameters.
class AdamW {
 public:
  // Throws Error(kModelBadConfig) when the options are invalid.
  AdamW(AdamWOptions options, const ParamLayout& layout);

  // One update: clips (scaling inside the update; `grads` is only read), then for every
  // tensor of the layout, with t = step() + 1 and lr = schedule.lr(step()):
  //   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
  //   p = p (1 - lr wd) - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
  // in double, stored as float. A gradient with a NaN or an infinity changes nothing.
  // REQUIRES: params.size() == grads.size() == layout.total.
  UpdateStats update(std::span<float> params, std::span<const float> grads);

  // The state, for checkpoints: write them back (and set_step) to resume.
  std::span<float> first_moment() { return m_; }
  std::span<const float> first_moment() const { return m_; }
  std::span<float> second_moment() { return v_; }
  std::span<const float> second_moment() const { return v_; }
  uint64_t step() const { return step_; }
  void set_step(uint64_t step) { step_ = step; }
  void reset();  // zero moments, step 0

  const AdamWOptions& options() const { return options_; }

 private:
  struct Range {
    size_t offset = 0, size = 0;
    bool decay = false;
  };
  AdamWOptions options_;
  size_t total_ = 0;
  std::vector<Range> ranges_;
  std::vector<float> m_, v_;
  uint64_t step_ = 0;
};

}  // namespace hsring::train
