// Host vectors to and from device buffers, and the random values the kernel tests fill
// them with (CUDA builds only: the GPU kernel tests).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/cuda_handles.h"

namespace hsring::gpu_test {

// splitmix64: the next value of the sequence `state` walks.
inline uint64_t next(uint64_t& state) {
  state += 0x9E3779B97F4A7C15ull;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-scale, scale).
inline float uniform(uint64_t& state, float scale) {
  return scale * (float(next(state) >> 40) / float(1 << 24) * 2.0f - 1.0f);
}

// n values uniform in [-scale, scale), drawn in order from `state`.
inline std::vector<float> uniform_values(size_t n, uint64_t& state, float scale) {
  std::vector<float> values(n);
  for (float& v : values) v = uniform(state, scale);
  return values;
}

template <class T>
gpu::DeviceBuffer to_device(const std::vector<T>& host) {
  gpu::DeviceBuffer buffer =
      gpu::DeviceBuffer::allocate(std::max<size_t>(1, host.size()) * sizeof(T));
  HSRING_CUDA_CHECK(
      cudaMemcpy(buffer.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return buffer;
}

template <class T>
std::vector<T> to_host(const gpu::DeviceBuffer& buffer, size_t count) {
  std::vector<T> host(count);
  HSRING_CUDA_CHECK(
      cudaMemcpy(host.data(), buffer.data(), count * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace hsring::gpu_test
