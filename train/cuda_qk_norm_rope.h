// Qwen3's per-head QK-norm followed by RoPE as one pass each way (forward, backward), for the
// DFlash step's queries and keys: the same maths as gpu::launch_rms_norm_forward then
// gpu::launch_rope_apply (gpu/ops/rms_norm.h, gpu/ops/rope.h), and their backward, without the
// intermediate arrays. Plain host declarations (C++ sources include this); each launches on
// `stream` and returns the launch's error, never synchronising. REQUIRES (else
// cudaErrorInvalidValue, nothing launched): head_dim even, 2..256.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace hsring::train {

// y = RoPE(RMSNorm(x) * w) for every head of x [rows, heads * head_dim]: the norm over each
// head's head_dim values (eps), weight w [head_dim], then RoPE pairing i with i + head_dim/2
// (HF rotate_half), cos/sin [rows, head_dim/2]. y is written in fp32 when y != nullptr
// and/or rounded to bf16 into y_bf16 when that is given (at least one, else
// cudaErrorInvalidValue). y may not alias x.
cudaError_t launch_qk_norm_rope_forward(const float* x, const float* w, uint32_t rows,
                                        uint32_t heads, uint32_t head_dim, float eps,
                                        const float* cos, const float* sin, float* y,
                                        cudaStream_t stream, uint16_t* y_bf16 = nullptr);
// The same from x in bf16 (as the bf16 projection writes it, read as the floats it holds).
cudaError_t launch_qk_norm_rope_forward(const uint16_t* x, const float* w, uint32_t rows,
                                        uint32_t heads, uint32_t head_dim, float eps,
                                        const float* cos, const float* sin, float* y,
                                        cudaStream_t stream, uint16_t* y_bf16 = nullptr);

// From dy = d(loss)/d(y): dx = d(loss)/d(x), written to dx (fp32) when dx != nullptr and/or
// rounded to bf16 into dx_bf16 when dx_bf16 != nullptr (at least one non-null, else
// cudaErrorInvalidValue), and the weight's gradient ADDED to dweight [head_dim] (atomics:
// the order of the additions varies, so may its last bits). dy is not changed; dx may not
// alias x or dy. dx's rows are dx_stride elements apart (0: heads * head_dim, packed), so
// that dx can be a column range of a wider array, one operand with other gradients
// (cudaErrorInvalidValue below heads * head_dim).
cudaError_t launch_qk_norm_rope_backward(const float* x, const float* w, const float* dy,
                                         uint32_t rows, uint32_t heads, uint32_t head_dim,
                                         float eps, const float* cos, const float* sin, float* dx,
                                         uint16_t* dx_bf16, float* dweight, cudaStream_t stream,
                                         uint32_t dx_stride = 0);
// The same from the forward's x in bf16.
cudaError_t launch_qk_norm_rope_backward(const uint16_t* x, const float* w, const float* dy,
                                         uint32_t rows, uint32_t heads, uint32_t head_dim,
                                         float eps, const float* cos, const float* sin, float* dx,
                                         uint16_t* dx_bf16, float* dweight, cudaStream_t stream,
                                         uint32_t dx_stride = 0);

}  // namespace hsring::train
