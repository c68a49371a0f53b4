// The standard deviation of the Gaussian noise a GPU drafter adds to each batch, as a
// function of its step: constant, or a linear ramp. Parsed from --noise-std and
// --noise-schedule by the drafter and, to fail early, by the launcher.
#pragma once

#include <cstdint>
#include <string>

namespace hsring::gpu {

struct NoiseSchedule {
  enum class Kind { kConstant, kLinear };
  Kind kind = Kind::kConstant;
  double start = 0;    // std at step 0 (the constant std for kConstant)
  double end = 0;      // std from step `steps` on (kLinear)
  uint64_t steps = 0;  // length of the ramp (kLinear)

  // The std for batch number `step` of this drafter.
  double std_at(uint64_t step) const;
  // True when some step gets noise.
  bool enabled() const { return start > 0 || (kind == Kind::kLinear && end > 0); }
  // The flag value that parses back to this schedule ("constant", "linear:0.1,0,1000").
  std::string describe() const;
};

// Parses --noise-schedule: "constant" (std = `noise_std` at every step) or
// "linear:START,END,STEPS" (std from START to END over STEPS steps, then END; --noise-std
// is then unused). Throws Error(kUsage) naming the flag and the accepted forms.
NoiseSchedule parse_noise_schedule(const std::string& text, double noise_std);

}  // namespace hsring::gpu
