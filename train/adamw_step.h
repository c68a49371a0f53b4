// One AdamW update's factors, the same for every element of a tensor: decided once here
// (adamw_step) for the CPU optimizer (train/optimizer.h) and the CUDA one
// (train/cuda_flat_state.h, whose kernel takes this struct: C++17, a header of its own).
#pragma once

#include <cstdint>

namespace hsring::train {

struct AdamWOptions;

struct AdamWStep {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0;
  double keep = 1;         // the parameter's factor: 1 - lr * weight_decay where it decays, else 1
  double clip = 1;         // the gradient's: max_grad_norm / its global norm when past it, else 1
  double correction1 = 1;  // 1 - beta1^t, t = step + 1
  double correction2 = 1;  // 1 - beta2^t
};

// The factors of update `step` (0-based; its rate from options.schedule) for a gradient of
// global norm `grad_norm`, on a tensor that `decays` (ParamInfo::weight_decay) or not.
// REQUIRES: grad_norm finite (a non-finite gradient is skipped, not updated).
AdamWStep adamw_step(const AdamWOptions& options, uint64_t step, double grad_norm, bool decays);

}  // namespace hsring::train
