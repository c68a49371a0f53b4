// The device's bf16 conversions, and loads and stores of arrays held in fp32 or bf16, for
// every CUDA file of gpu/, model/ and train/. float_to_bf16 rounds to nearest, ties to even,
// and keeps a NaN's sign and top payload bits (made quiet): the bits of the host's
// float_to_bf16 (model/float_convert.h) for every input, so a kernel that writes bf16 gives
// what the CPU reference rounds, and a kernel writing its bf16 output directly gives the
// bits of a rounding pass over its fp32 output.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace hsring::gpu {

__device__ __forceinline__ float bf16_to_float(uint32_t bits) {
  return __uint_as_float(bits << 16);
}

__device__ __forceinline__ uint16_t float_to_bf16(float value) {
  const uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40u);  // quiet NaN
  return uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// Two values rounded as float_to_bf16 rounds each (NaNs included), lo in the low half: one
// 4-byte word of a bf16 array.
__device__ __forceinline__ uint32_t bf16_pair(float lo, float hi) {
  return uint32_t(float_to_bf16(lo)) | (uint32_t(float_to_bf16(hi)) << 16);
}

// Two values rounded in one instruction (cvt.rn.bf16x2: the same bits as float_to_bf16 but
// for a NaN, which becomes the canonical one), lo in the low half: a tensor-core operand
// pair (the A fragments of mma.sync and wgmma) built from fp32 accumulators.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// The two values of a bf16 pair (bf16_pair's or pack_bf16's word), lo first.
__device__ __forceinline__ float2 unpack_bf16(uint32_t pair) {
  return make_float2(bf16_to_float(pair & 0xffffu), bf16_to_float(pair >> 16));
}

// ---- Arrays in either precision ------------------------------------------------------------
// The element-wise kernels read their inputs as floats whether they are held in fp32 or bf16,
// and write each output to an fp32 array, a bf16 one (rounded), or both: a null array is not
// written.

// Value i of an input held in fp32 or in bf16, as a float.
__device__ __forceinline__ float load(const float* in, uint64_t i) { return in[i]; }
__device__ __forceinline__ float load(const uint16_t* in, uint64_t i) {
  return bf16_to_float(in[i]);
}

// Stores value i of an output written in fp32 (out), in bf16 (out_bf16), or both.
__device__ __forceinline__ void store(float* out, uint16_t* out_bf16, uint64_t i, float value) {
  if (out) out[i] = value;
  if (out_bf16) out_bf16[i] = float_to_bf16(value);
}
// Value i into an array of either precision (bf16: rounded).
__device__ __forceinline__ void store(float* out, uint64_t i, float value) { out[i] = value; }
__device__ __forceinline__ void store(uint16_t* out, uint64_t i, float value) {
  out[i] = float_to_bf16(value);
}

// Values 4q .. 4q + 3 (the array 16-byte aligned for fp32, 8-byte for bf16).
__device__ __forceinline__ float4 load4(const float* in, uint64_t q) {
  return reinterpret_cast<const float4*>(in)[q];
}
__device__ __forceinline__ float4 load4(const uint16_t* in, uint64_t q) {
  const uint2 v = reinterpret_cast<const uint2*>(in)[q];
  return {bf16_to_float(v.x & 0xffffu), bf16_to_float(v.x >> 16), bf16_to_float(v.y & 0xffffu),
          bf16_to_float(v.y >> 16)};
}
// store() of values 4q .. 4q + 3, aligned as load4 needs.
__device__ __forceinline__ void store4(float* out, uint16_t* out_bf16, uint64_t q, float4 v) {
  if (out) reinterpret_cast<float4*>(out)[q] = v;
  if (out_bf16) reinterpret_cast<uint2*>(out_bf16)[q] = {bf16_pair(v.x, v.y), bf16_pair(v.z, v.w)};
}

// Values 8g .. 8g + 7 of an array 16-byte aligned, in fp32 (two loads) or bf16 (one), as
// floats; and their store in the array's precision (bf16: rounded).
__device__ __forceinline__ void load8(const float* in, uint64_t g, float (&v)[8]) {
  const float4 a = reinterpret_cast<const float4*>(in)[2 * g];
  const float4 b = reinterpret_cast<const float4*>(in)[2 * g + 1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void load8(const uint16_t* in, uint64_t g, float (&v)[8]) {
  const uint4 w = reinterpret_cast<const uint4*>(in)[g];
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    v[2 * k] = bf16_to_float(words[k] & 0xffffu);
    v[2 * k + 1] = bf16_to_float(words[k] >> 16);
  }
}
__device__ __forceinline__ void store8(float* out, uint64_t g, const float (&v)[8]) {
  reinterpret_cast<float4*>(out)[2 * g] = {v[0], v[1], v[2], v[3]};
  reinterpret_cast<float4*>(out)[2 * g + 1] = {v[4], v[5], v[6], v[7]};
}
__device__ __forceinline__ void store8(uint16_t* out, uint64_t g, const float (&v)[8]) {
  uint32_t words[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) words[k] = bf16_pair(v[2 * k], v[2 * k + 1]);
  reinterpret_cast<uint4*>(out)[g] = {words[0], words[1], words[2], words[3]};
}

// Whether every array given (null ones aside) allows load4 / store4.
template <class... T>
__device__ __forceinline__ bool four_aligned(const T*... arrays) {
  return ((reinterpret_cast<uintptr_t>(arrays) % (4 * sizeof(T)) == 0) && ...);
}

}  // namespace hsring::gpu
