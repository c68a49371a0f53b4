// The data path's kernels. Memory-bound ones move 16 bytes per thread per access where
// the shape allows (hidden size a multiple of the vector), with a grid-stride loop over a
// grid sized to the device; a scalar variant covers any other shape.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <type_traits>

#include "common/synthetic_element.h"
#include "gpu/bf16.cuh"
#include "gpu/kernels.h"
#include "gpu/launch_grid.h"
#include "gpu/philox.h"

namespace hsring::gpu {

namespace {

constexpr int kThreads = 256;

unsigned grid_for(uint64_t work_items) { return grid_stride_blocks(work_items, kThreads); }

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Bits is uint16_t (bf16/fp16) or uint32_t (fp32); kVec elements make 16 bytes, or 1.
template <class Bits, int kVec>
__global__ void synthetic_layers_kernel(std::byte* dst, uint64_t layer_stride, uint64_t batch_id,
                                        uint32_t tokens, uint32_t hidden, uint64_t row_pitch) {
  const uint32_t layer = blockIdx.y;
  Bits* out = reinterpret_cast<Bits*>(dst + layer * layer_stride);
  const uint64_t vectors = uint64_t(tokens) * hidden / kVec;
  for (uint64_t v = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors;
       v += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t e = v * kVec;
    const uint32_t t = uint32_t(e / hidden);
    const uint32_t d = uint32_t(e % hidden);
    const uint64_t at = uint64_t(t) * row_pitch + d;
    if constexpr (kVec == 1) {
      out[at] = Bits(synthetic_element_bits(batch_id, layer, t, d, sizeof(Bits)));
    } else {
      union {
        uint4 vector;
        Bits lanes[kVec];
      } pack;
#pragma unroll
      for (int k = 0; k < kVec; ++k)
        pack.lanes[k] = Bits(synthetic_element_bits(batch_id, layer, t, d + k, sizeof(Bits)));
      reinterpret_cast<uint4*>(out)[at / kVec] = pack.vector;
    }
  }
}

// Sums the block's counts and takes the minimum first index; thread 0 publishes them.
__device__ void publish_verdict(unsigned long long count, unsigned long long first,
                                VerifyVerdict* verdict) {
  for (int offset = 16; offset > 0; offset /= 2) {
    count += __shfl_down_sync(0xFFFFFFFFu, count, offset);
    const unsigned long long other = __shfl_down_sync(0xFFFFFFFFu, first, offset);
    first = other < first ? other : first;
  }
  __shared__ unsigned long long counts[kThreads / 32];
  __shared__ unsigned long long firsts[kThreads / 32];
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) {
    counts[warp] = count;
    firsts[warp] = first;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long total = 0, lowest = kNoMismatch;
    for (int w = 0; w < kThreads / 32; ++w) {
      total += counts[w];
      lowest = firsts[w] < lowest ? firsts[w] : lowest;
    }
    if (total > 0) {
      atomicAdd(&verdict->mismatches, total);
      atomicMin(&verdict->first_bad, lowest);
    }
  }
}

template <class Bits, int kVec>
__global__ void verify_assembled_kernel(const std::byte* src, uint64_t batch_id, uint32_t layers,
                                        uint32_t tokens, uint32_t hidden, VerifyVerdict* verdict) {
  const Bits* in = reinterpret_cast<const Bits*>(src);
  const uint64_t row = uint64_t(layers) * hidden;
  const uint64_t vectors = uint64_t(tokens) * row / kVec;
  unsigned long long count = 0, first = kNoMismatch;
  for (uint64_t v = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors;
       v += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t e = v * kVec;
    const uint32_t t = uint32_t(e / row);
    const uint32_t j = uint32_t(e % row);
    // A vector never straddles two layers: the caller picks kVec > 1 only when it divides hidden.
    const uint32_t layer = j / hidden;
    const uint32_t d = j % hidden;
    union {
      uint4 vector;
      Bits lanes[kVec];
    } pack;
    if constexpr (kVec == 1) {
      pack.lanes[0] = in[e];
    } else {
      pack.vector = reinterpret_cast<const uint4*>(in)[v];
    }
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      if (pack.lanes[k] != Bits(synthetic_element_bits(batch_id, layer, t, d + k, sizeof(Bits)))) {
        ++count;
        if (e + k < first) first = e + k;
      }
    }
  }
  publish_verdict(count, first, verdict);
}

// Bit-level views of the three element types: loads and stores move raw bits, arithmetic
// is fp32, narrowing rounds to nearest even.
template <DType kType>
struct Codec;
template <>
struct Codec<DType::kBF16> {
  using Bits = uint16_t;
  static __device__ float to_float(Bits b) { return bf16_to_float(b); }
  static __device__ Bits from_float(float f) { return float_to_bf16(f); }
};
template <>
struct Codec<DType::kFP16> {
  using Bits = uint16_t;
  static __device__ float to_float(Bits b) { return __half2float(__ushort_as_half(b)); }
  static __device__ Bits from_float(float f) { return __half_as_ushort(__float2half_rn(f)); }
};
template <>
struct Codec<DType::kFP32> {
  using Bits = uint32_t;
  static __device__ float to_float(Bits b) { return __uint_as_float(b); }
  static __device__ Bits from_float(float f) { return __float_as_uint(f); }
};

// One thread per group of four elements: one Philox call gives the group's four normals.
template <DType kType>
__global__ void add_noise_kernel(void* raw, uint64_t elements, float std, uint64_t seed,
                                 uint64_t step) {
  using C = Codec<kType>;
  using Bits = typename C::Bits;
  using Vector = typename std::conditional<sizeof(Bits) == 2, uint2, uint4>::type;
  Bits* data = static_cast<Bits*>(raw);
  const uint64_t groups = (elements + 3) / 4;
  for (uint64_t g = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += uint64_t(gridDim.x) * blockDim.x) {
    float noise[4];
    gaussian4(seed, step, g, noise);
    const uint64_t base = g * 4;
    if (base + 4 <= elements) {
      union {
        Vector vector;
        Bits lanes[4];
      } pack;
      pack.vector = reinterpret_cast<const Vector*>(data)[g];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        pack.lanes[k] = C::from_float(C::to_float(pack.lanes[k]) + std * noise[k]);
      reinterpret_cast<Vector*>(data)[g] = pack.vector;
    } else {
      for (uint64_t e = base; e < elements; ++e)
        data[e] = C::from_float(C::to_float(data[e]) + std * noise[e - base]);
    }
  }
}

__global__ void sleep_kernel(uint64_t nanoseconds) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < nanoseconds);
}

__global__ void timestamp_kernel(uint64_t* dst) {
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  *dst = now;
}

template <class Bits>
cudaError_t synthetic_layers_as(void* dst, uint64_t layer_stride, uint64_t batch_id,
                                uint32_t layers, uint32_t tokens, uint32_t hidden,
                                uint64_t row_pitch, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(Bits);
  const bool vector =
      hidden % kVec == 0 && row_pitch % kVec == 0 && layer_stride % 16 == 0 && aligned16(dst);
  const uint64_t items = uint64_t(tokens) * hidden / (vector ? kVec : 1);
  const dim3 grid(grid_for(items * layers) / layers + 1, layers);
  auto* out = static_cast<std::byte*>(dst);
  if (vector)
    synthetic_layers_kernel<Bits, kVec>
        <<<grid, kThreads, 0, stream>>>(out, layer_stride, batch_id, tokens, hidden, row_pitch);
  else
    synthetic_layers_kernel<Bits, 1>
        <<<grid, kThreads, 0, stream>>>(out, layer_stride, batch_id, tokens, hidden, row_pitch);
  return cudaGetLastError();
}

template <class Bits>
cudaError_t verify_as(const void* src, uint64_t batch_id, uint32_t layers, uint32_t tokens,
                      uint32_t hidden, VerifyVerdict* verdict, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(Bits);
  const bool vector = hidden % kVec == 0 && aligned16(src);
  const uint64_t items = uint64_t(tokens) * layers * hidden / (vector ? kVec : 1);
  auto* in = static_cast<const std::byte*>(src);
  if (vector)
    verify_assembled_kernel<Bits, kVec>
        <<<grid_for(items), kThreads, 0, stream>>>(in, batch_id, layers, tokens, hidden, verdict);
  else
    verify_assembled_kernel<Bits, 1>
        <<<grid_for(items), kThreads, 0, stream>>>(in, batch_id, layers, tokens, hidden, verdict);
  return cudaGetLastError();
}

template <DType kType>
cudaError_t noise_as(void* data, uint64_t elements, float std, uint64_t seed, uint64_t step,
                     cudaStream_t stream) {
  const uint64_t groups = (elements + 3) / 4;
  add_noise_kernel<kType>
      <<<grid_for(groups), kThreads, 0, stream>>>(data, elements, std, seed, step);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_synthetic_layers(void* dst, uint64_t layer_stride_bytes, uint64_t batch_id,
                                    uint32_t layers, uint32_t tokens, uint32_t hidden,
                                    uint32_t elem_bytes, cudaStream_t stream, uint64_t row_pitch) {
  if (tokens == 0 || layers == 0 || hidden == 0) return cudaSuccess;
  if (row_pitch == 0) row_pitch = hidden;
  if (row_pitch < hidden) return cudaErrorInvalidValue;
  if (elem_bytes == 2)
    return synthetic_layers_as<uint16_t>(dst, layer_stride_bytes, batch_id, layers, tokens, hidden,
                                         row_pitch, stream);
  if (elem_bytes == 4)
    return synthetic_layers_as<uint32_t>(dst, layer_stride_bytes, batch_id, layers, tokens, hidden,
                                         row_pitch, stream);
  return cudaErrorInvalidValue;
}

cudaError_t launch_verify_assembled(const void* src, uint64_t batch_id, uint32_t layers,
                                    uint32_t tokens, uint32_t hidden, uint32_t elem_bytes,
                                    VerifyVerdict* verdict, cudaStream_t stream) {
  if (cudaError_t err =
          cudaMemsetAsync(&verdict->mismatches, 0, sizeof verdict->mismatches, stream))
    return err;
  if (cudaError_t err =
          cudaMemsetAsync(&verdict->first_bad, 0xFF, sizeof verdict->first_bad, stream))
    return err;
  if (tokens == 0 || layers == 0 || hidden == 0) return cudaSuccess;
  if (elem_bytes == 2)
    return verify_as<uint16_t>(src, batch_id, layers, tokens, hidden, verdict, stream);
  if (elem_bytes == 4)
    return verify_as<uint32_t>(src, batch_id, layers, tokens, hidden, verdict, stream);
  return cudaErrorInvalidValue;
}

cudaError_t launch_add_noise(void* data, uint64_t elements, DType dtype, float std, uint64_t seed,
                             uint64_t step, cudaStream_t stream) {
  if (elements == 0) return cudaSuccess;
  // The vector path reads 4 elements at once: 8 bytes (16-bit types) or 16 bytes (fp32).
  if ((reinterpret_cast<uintptr_t>(data) & 15u) != 0) return cudaErrorMisalignedAddress;
  switch (dtype) {
    case DType::kBF16:
      return noise_as<DType::kBF16>(data, elements, std, seed, step, stream);
    case DType::kFP16:
      return noise_as<DType::kFP16>(data, elements, std, seed, step, stream);
    case DType::kFP32:
      return noise_as<DType::kFP32>(data, elements, std, seed, step, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_timestamp(uint64_t* dst, cudaStream_t stream) {
  timestamp_kernel<<<1, 1, 0, stream>>>(dst);
  return cudaGetLastError();
}

cudaError_t launch_gpu_sleep(uint32_t microseconds, cudaStream_t stream) {
  sleep_kernel<<<1, 1, 0, stream>>>(uint64_t(microseconds) * 1000);
  return cudaGetLastError();
}

}  // namespace hsring::gpu
