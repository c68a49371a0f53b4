// Shared pieces of the GPU tests: skipping with a printed reason where there is no GPU,
// and host references of what the GPU kernels compute.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/device.h"

namespace hsring::gpu_test {

// Skips the calling test (with the reason in its output) when fewer than `n` GPUs are
// visible. Use at the top of a TEST body.
#define HSRING_REQUIRE_GPUS(n)                                                                   \
  do {                                                                                           \
    const ::hsring::gpu::GpuInventory hsring_inventory_ = ::hsring::gpu::probe_gpus();           \
    if (hsring_inventory_.count < (n))                                                           \
      GTEST_SKIP() << "needs " << (n) << " GPU(s); this machine has " << hsring_inventory_.count \
                   << (hsring_inventory_.why_none.empty()                                        \
                           ? ""                                                                  \
                           : " (" + hsring_inventory_.why_none + ")");                           \
  } while (0)

inline float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(uint32_t(bits) << 16); }

// Round to nearest, ties to even, as __float2bfloat16_rn does for finite values.
inline uint16_t float_to_bf16(float value) {
  const uint32_t u = std::bit_cast<uint32_t>(value);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
// Each value so rounded.
inline std::vector<uint16_t> float_to_bf16(const std::vector<float>& values) {
  std::vector<uint16_t> rounded(values.size());
  for (size_t i = 0; i < values.size(); ++i) rounded[i] = float_to_bf16(values[i]);
  return rounded;
}

// How far the GPU's bf16(clean + noise) may be from the host's: one bf16 ulp of the
// result (at most 2^-7 of it), plus what a last-bit difference between host and device
// libm (log, sin, cos) in the fp32 sum can grow to when clean and noise nearly cancel.
inline float noise_tolerance(float got, float want, float clean, float noise) {
  return std::ldexp(std::fmax(std::fabs(got), std::fabs(want)), -7) +
         1e-6f * (std::fabs(clean) + std::fabs(noise));
}

}  // namespace hsring::gpu_test
