// The bf16 <-> fp32 conversion op: the ring's bf16 features widened for fp32 kernels, and
// fp32 arrays rounded to bf16 (to nearest, ties to even; NaN stays NaN: gpu/bf16.cuh's
// float_to_bf16, the host's bits) as the operands of the bf16 tensor-core products and the
// target's bf16 weights. Plain host functions (no CUDA syntax: C++ sources call them); each
// launches on `stream` and returns the launch's error; none synchronises.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace hsring::gpu {

// out[i] = in[i] widened to fp32 (exact): n values.
cudaError_t launch_bf16_to_float(const uint16_t* in, size_t n, float* out, cudaStream_t stream);

// out[i] = in[i] rounded to bf16: n values.
cudaError_t launch_float_to_bf16(const float* in, size_t n, uint16_t* out, cudaStream_t stream);

// in [rows, cols] rounded the same way into out's rows, out_stride elements apart (>= cols;
// else cudaErrorInvalidValue): a column range of a wider array.
cudaError_t launch_float_to_bf16_rows(const float* in, size_t rows, size_t cols, uint16_t* out,
                                      size_t out_stride, cudaStream_t stream);

}  // namespace hsring::gpu
