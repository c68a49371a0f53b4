#include "train/optimizer.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "common/contract.h"
#include "common/error.h"

namespace hsring::train {

double LrSchedule::lr(uint64_t step) const {
  if (step < warmup_steps) return peak_lr * double(step + 1) / double(warmup_steps);
  if (total_steps == 0) return peak_lr;
  if (step >= total_steps) return min_lr;
  const double progress = double(step - warmup_steps) / double(total_steps - warmup_steps);
  return min_lr + (peak_lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

std::string validate_adamw_options(const AdamWOptions& o) {
  const LrSchedule& s = o.schedule;
  const auto finite_nonneg = [](double x) { return std::isfinite(x) && x >= 0; };
  if (!finite_nonneg(s.peak_lr) || !finite_nonneg(s.min_lr))
    return "learning rates must be finite and non-negative";
  if (s.min_lr > s.peak_lr) return "min_lr must not exceed peak_lr";
  if (s.total_steps != 0 && s.total_steps < s.warmup_steps)
    return fmt::format("total_steps ({}) must be 0 (no decay) or at least warmup_steps ({})",
                       s.total_steps, s.warmup_steps);
  if (!(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1))
    return "beta1 and beta2 must lie in [0, 1)";
  if (!(o.eps > 0) || !std::isfinite(o.eps)) return "eps must be finite and positive";
  if (!finite_nonneg(o.weight_decay)) return "weight_decay must be finite and non-negative";
  if (std::isnan(o.max_grad_norm)) return "max_grad_norm must be a number";
  return "";
}

double global_norm(std::span<const float> values) {
  double squares = 0;
  for (float x : values) squares += double(x) * double(x);
  return std::sqrt(squares);
}

double clip_global_norm(std::span<float> grads, double max_norm) {
  const double norm = global_norm(grads);
  if (max_norm > 0 && std::isfinite(norm) && norm > max_norm) {
    const double scale = max_norm / norm;
    for (float& g : grads) g = float(double(g) * scale);
  }
  return norm;
}

AdamWStep adamw_step(const AdamWOptions& o, uint64_t step, double grad_norm, bool decays) {
  HSRING_REQUIRE(std::isfinite(grad_norm));
  AdamWStep s;
  s.lr = o.schedule.lr(step);
  s.beta1 = o.beta1;
  s.beta2 = o.beta2;
  s.eps = o.eps;
  s.keep = decays ? 1.0 - s.lr * o.weight_decay : 1.0;
  if (o.max_grad_norm > 0 && grad_norm > o.max_grad_norm) s.clip = o.max_grad_norm / grad_norm;
  const auto t = double(step + 1);
  s.correction1 = 1.0 - std::pow(o.beta1, t);
  s.correction2 = 1.0 - std::pow(o.beta2, t);
  return s;
}

AdamW::AdamW(AdamWOptions options, const ParamLayout& layout)
    : options_(options), total_(layout.total) {
  if (std::string why = validate_adamw_options(options_); !why.empty())
    throw Error(Errc::kModelBadConfig, "optimizer: " + why);
  for (const ParamInfo& t : layout.tensors) {
    if (t.offset + t.size > total_)
      throw Error(Errc::kModelBadConfig,
                  fmt::format("optimizer: tensor '{}' ends past the buffer of {}", t.name, total_));
    ranges_.push_back({t.offset, t.size, t.weight_decay});
  }
  m_.assign(total_, 0.0f);
  v_.assign(total_, 0.0f);
}

void AdamW::reset() {
  std::fill(m_.begin(), m_.end(), 0.0f);
  std::fill(v_.begin(), v_.end(), 0.0f);
  step_ = 0;
}

UpdateStats AdamW::update(std::span<float> params, std::span<const float> grads) {
  if (params.size() != total_ || grads.size() != total_)
    throw Error(Errc::kModel,
                fmt::format("optimizer: buffers of {} and {} values, the layout has {}",
                            params.size(), grads.size(), total_));
  const AdamWOptions& o = options_;
  UpdateStats stats;
  stats.grad_norm = global_norm(grads);
  stats.step = step_;
  if (!std::isfinite(stats.grad_norm)) {
    stats.skipped = true;
    return stats;
  }
  // The factors are the same for every tensor but for weight decay: two sets, once.
  const AdamWStep decayed = adamw_step(o, step_, stats.grad_norm, true);
  const AdamWStep plain = adamw_step(o, step_, stats.grad_norm, false);
  for (const Range& r : ranges_) {
    const AdamWStep& s = r.decay ? decayed : plain;
    for (size_t i = r.offset; i < r.offset + r.size; ++i) {
      const double g = double(grads[i]) * s.clip;
      const double m = s.beta1 * double(m_[i]) + (1.0 - s.beta1) * g;
      const double v = s.beta2 * double(v_[i]) + (1.0 - s.beta2) * g * g;
      m_[i] = float(m);
      v_[i] = float(v);
      const double update = (m / s.correction1) / (std::sqrt(v / s.correction2) + s.eps);
      params[i] = float(double(params[i]) * s.keep - s.lr * update);
    }
  }
  stats.clipped = plain.clip < 1.0;
  stats.lr = plain.lr;
  stats.step = ++step_;
  return stats;
}

}  // namespace hsring::train
