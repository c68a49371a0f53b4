// The SwiGLU op, forward and backward: out = silu(gate) * up, element by element, in fp32
// from inputs held in fp32 or bf16 (uint16_t), each output written in fp32, in bf16 (rounded
// as gpu/bf16.cuh's float_to_bf16: the bf16 products' operand without a rounding pass), or
// both; a null array is not written. For the target's MLP (model/) and the drafter's
// training step (train/). Plain host functions (no CUDA syntax: C++ sources call them); each
// launches on `stream` and returns the launch's error; none synchronises.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace hsring::gpu {

// How silu(g) = g sigmoid(g) is computed.
enum class SiluPrecision {
  kFast,    // g * (1 / (1 + __expf(-g))): the training step's (its backward is this one's)
  kRounded  // g / (1 + expf(-g)), expf within 1 ulp and a correctly rounded division: the
            // target's forward, as the fp32 CPU reference (ops/swiglu.h)
};

// gate, up and out: n values each.
cudaError_t launch_swiglu_forward(const float* gate, const float* up, size_t n, float* out,
                                  cudaStream_t stream, uint16_t* out_bf16 = nullptr,
                                  SiluPrecision precision = SiluPrecision::kFast);
cudaError_t launch_swiglu_forward(const uint16_t* gate, const uint16_t* up, size_t n, float* out,
                                  cudaStream_t stream, uint16_t* out_bf16 = nullptr,
                                  SiluPrecision precision = SiluPrecision::kFast);

// The fused gate-up projection's layout: row r of gate_up [rows, 2 inter] is gate | up, and
// out [rows, inter] row r = silu(gate) * up.
cudaError_t launch_swiglu_forward_fused(const uint16_t* gate_up, uint32_t rows, uint32_t inter,
                                        float* out, cudaStream_t stream,
                                        uint16_t* out_bf16 = nullptr,
                                        SiluPrecision precision = SiluPrecision::kFast);

// The backward of the kFast forward: dgate and dup (written) from dout, n values each.
cudaError_t launch_swiglu_backward(const float* gate, const float* up, const float* dout, size_t n,
                                   float* dgate, float* dup, cudaStream_t stream,
                                   uint16_t* dgate_bf16 = nullptr, uint16_t* dup_bf16 = nullptr);
cudaError_t launch_swiglu_backward(const uint16_t* gate, const uint16_t* up, const uint16_t* dout,
                                   size_t n, float* dgate, float* dup, cudaStream_t stream,
                                   uint16_t* dgate_bf16 = nullptr, uint16_t* dup_bf16 = nullptr);

}  // namespace hsring::gpu
