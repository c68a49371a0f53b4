// The RMSNorm op, forward and backward: y = x / sqrt(mean(x^2) + eps) * weight per row of fp32
// x [rows, dim], for the target's forward (model/) and the drafter's training step (train/).
// Plain host functions (no CUDA syntax: C++ sources call them); each launches on `stream` and
// returns the launch's error; none synchronises. No atomics: every output has the same bits
// on every run.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace hsring::gpu {

// How the row's scale 1 / sqrt(mean(x^2) + eps) is computed.
enum class RmsNormScale {
  kFast,    // rsqrtf (within 2 ulp): the training step's
  kRounded  // 1 / sqrtf, each step correctly rounded: the target's forward, as the fp32 CPU
            // reference (ops/rms_norm.h) computes it
};

// y = RMSNorm(x) * weight into y (fp32), y_bf16 (rounded as gpu/bf16.cuh's float_to_bf16),
// or both; a null array is not written. x_copy, when given, receives x as it is (a residual's
// copy, on the pass that reads it anyway). y and x_copy may not alias x. A row's sum of
// squares runs in fp32 over one warp (dim <= 256: the per-head norms' many short rows) or
// one 256-thread block, in a fixed order.
cudaError_t launch_rms_norm_forward(const float* x, const float* weight, uint32_t rows,
                                    uint32_t dim, float eps, float* y, cudaStream_t stream,
                                    uint16_t* y_bf16 = nullptr, float* x_copy = nullptr,
                                    RmsNormScale scale = RmsNormScale::kFast);

// The backward in one pass over x and dy (the kFast scale): dx into dx (written, or added to
// with `accumulate`, which needs dx), dx_bf16 (rounded as float_to_bf16 rounds the fp32 dx)
// or both, and dweight += sum over rows of dy * x / rms(x). Each of up to
// kRmsNormBackwardBlocks blocks sums its rows' share of dweight into partials
// [kRmsNormBackwardBlocks * dim], which are then added in block order, in double: no atomics,
// the same bits on every run.
inline constexpr uint32_t kRmsNormBackwardBlocks = 512;
cudaError_t launch_rms_norm_backward_rows(const float* x, const float* weight, const float* dy,
                                          uint32_t rows, uint32_t dim, float eps, float* dx,
                                          bool accumulate, float* dweight, float* partials,
                                          cudaStream_t stream, uint16_t* dx_bf16 = nullptr);

}  // namespace hsring::gpu
