// The synthetic payload's elements: a pure function of (batch, layer, token, dim), the one
// piece of a synthetic batch (worker/synthetic_batch.h) that the GPU kernels compute too
// (gpu/kernels.h), so it stands on the ground floor with no ring in sight.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HSRING_HOST_DEVICE __host__ __device__
#else
#define HSRING_HOST_DEVICE
#endif

namespace hsring {

// The element (bf16/fp16 bits, or fp32 bits) at (batch, layer, token, dim). Values are
// finite and normal, so they survive any float pipeline bit-exactly.
HSRING_HOST_DEVICE inline uint32_t synthetic_element_bits(uint64_t batch_id, uint32_t layer,
                                                          uint32_t token, uint32_t dim,
                                                          uint32_t dtype_bytes) {
  uint64_t x = (batch_id * 0x9E3779B97F4A7C15ull) ^ (uint64_t(layer) << 56) ^
               (uint64_t(token) << 24) ^ (uint64_t(dim) * 0xD1B54A32D192ED03ull);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  const uint32_t h = uint32_t(x);
  if (dtype_bytes == 4) return (h & 0x807FFFFFu) | ((120u + ((h >> 23) & 15u)) << 23);
  // bf16 and fp16 share the recipe: sign, a small exponent range, random mantissa.
  return dtype_bytes == 2 ? ((h & 0x807Fu) | ((120u + ((h >> 7) & 15u)) << 7)) & 0xFFFFu : 0u;
}

}  // namespace hsring
