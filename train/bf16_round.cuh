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

__device__ inline float widen(uint32_t bf16) { return __uint_as_float(bf16 << 16); }

// Value i of an input held in fp32 or in bf16, as a float.
__device__ inline float load(const float* in, uint64_t i) { return in[i]; }
__device__ inline float load(const uint16_t* in, uint64_t i) { return widen(in[i]); }

// Values 4q .. 4q + 3 (the array 16-byte aligned for fp32, 8-byte for bf16).
__device__ inline float4 load4(const float* in, uint64_t q) {
  return reinterpret_cast<const float4*>(in)[q];
}
__device__ inline float4 load4(const uint16_t* in, uint64_t q) {
  const uint2 v = reinterpret_cast<const uint2*>(in)[q];
  return {widen(v.x & 0xffffu), widen(v.x >> 16), widen(v.y & 0xffffu), widen(v.y >> 16)};
}
// store() of values 4q .. 4q + 3, aligned as load4 needs.
__device__ inline void store4(float* out, uint16_t* out_bf16, uint64_t q, float4 v) {
  if (out) reinterpret_cast<float4*>(out)[q] = v;
  if (out_bf16)
    reinterpret_cast<uint2*>(out_bf16)[q] = {
        uint32_t(round_to_bf16(v.x)) | (uint32_t(round_to_bf16(v.y)) << 16),
        uint32_t(round_to_bf16(v.z)) | (uint32_t(round_to_bf16(v.w)) << 16)};
}
// Values 8g .. 8g + 7 of an array 16-byte aligned, in fp32 (two loads) or bf16 (one), as
// floats; and their store in the array's precision (bf16: rounded).
__device__ inline void load8(const float* in, uint64_t g, float (&v)[8]) {
  const float4 a = reinterpret_cast<const float4*>(in)[2 * g];
  const float4 b = reinterpret_cast<const float4*>(in)[2 * g + 1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ inline void load8(const uint16_t* in, uint64_t g, float (&v)[8]) {
  const uint4 w = reinterpret_cast<const uint4*>(in)[g];
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    v[2 * k] = widen(words[k] & 0xffffu);
    v[2 * k + 1] = widen(words[k] >> 16);
  }
}
__device__ inline void store8(float* out, uint64_t g, const float (&v)[8]) {
  reinterpret_cast<float4*>(out)[2 * g] = {v[0], v[1], v[2], v[3]};
  reinterpret_cast<float4*>(out)[2 * g + 1] = {v[4], v[5], v[6], v[7]};
}
__device__ inline void store8(uint16_t* out, uint64_t g, const float (&v)[8]) {
  uint32_t words[4];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    words[k] = uint32_t(round_to_bf16(v[2 * k])) | (uint32_t(round_to_bf16(v[2 * k + 1])) << 16);
  reinterpret_cast<uint4*>(out)[g] = {words[0], words[1], words[2], words[3]};
}
// Value i into an array of either precision (bf16: rounded).
__device__ inline void store(float* out, uint64_t i, float value) { out[i] = value; }
__device__ inline void store(uint16_t* out, uint64_t i, float value) {
  out[i] = round_to_bf16(value);
}
// Whether every array given (null ones aside) allows load4 / store4.
template <class... T>
__device__ inline bool four_aligned(const T*... arrays) {
  return ((reinterpret_cast<uintptr_t>(arrays) % (4 * sizeof(T)) == 0) && ...);
}

}  // namespace hsring::train::cuda
