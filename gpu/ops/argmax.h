// The argmax op: each row's index of its largest value, as the target's greedy decoding and
// the DFlash step's predictions use it. A plain host function (no CUDA syntax: C++ sources
// call it); it launches on `stream` and returns the launch's error, never synchronising.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace hsring::gpu {

// out[r] = index of the largest of logits[r, 0..n), the first one on ties, NaNs skipped (0
// when all are), as ops::argmax (ops/argmax.h).
cudaError_t launch_argmax(const float* logits, uint32_t rows, uint32_t n, int32_t* out,
                          cudaStream_t stream);

}  // namespace hsring::gpu
