// fp32 to bf16 rounding as every kernel of the training step does it (to nearest, ties to
// even; NaN stays a quiet NaN), so that a kernel writing its bf16 output directly produces
// the same bits as launch_float_to_bf16 of its fp32 output.
#pragma once

#include <cstdint>

namespace hsring::train::cuda {

__device__ inline uint16_t round_to_bf16(float value) {
  const uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40u);  // quiet NaN
  return uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// Stores value i of an output written in fp32 (out), in bf16 (out_bf16), or both: a null
// array is not written.
__device__ inline void store(float* out, uint16_t* out_bf16, uint64_t i, float value) {
  if (out) out[i] = value;
  if (out_bf16) out_bf16[i] = round_to_bf16(value);
}

}  // namespace hsring::train::cuda
