// Counter-based Gaussian noise: Philox4x32-10 (Salmon et al., "Parallel random numbers: as
// easy as 1, 2, 3", SC'11) and the Box-Muller transform. Element i of a batch gets a value
// that depends only on (seed, step, i), so noise is reproducible from the seed and the
// drafter's step, whatever thread or GPU computes it. Host and device share this code, so
// tests check the GPU's noise against the host's.
#pragma once

#include <cmath>
#include <cstdint>

#ifndef HSRING_HOST_DEVICE
#if defined(__CUDACC__)
#define HSRING_HOST_DEVICE __host__ __device__
#else
#define HSRING_HOST_DEVICE
#endif
#endif

namespace hsring::gpu {

// Philox4x32 with 10 rounds, in place on `counter`.
HSRING_HOST_DEVICE inline void philox4x32_10(uint32_t counter[4], uint32_t key0, uint32_t key1) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(0xD2511F53u) * counter[0];
    const uint64_t p1 = uint64_t(0xCD9E8D57u) * counter[2];
    const uint32_t c0 = uint32_t(p1 >> 32) ^ counter[1] ^ key0;
    const uint32_t c1 = uint32_t(p1);
    const uint32_t c2 = uint32_t(p0 >> 32) ^ counter[3] ^ key1;
    const uint32_t c3 = uint32_t(p0);
    counter[0] = c0;
    counter[1] = c1;
    counter[2] = c2;
    counter[3] = c3;
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
}

// A uniform float in (0, 1), never 0 (Box-Muller takes its log).
HSRING_HOST_DEVICE inline float uniform_open(uint32_t bits) {
  return float(bits >> 8) * 5.9604645e-08f + 2.9802322e-08f;  // (k + 0.5) / 2^24
}

// Four standard normal values for elements [4 * group, 4 * group + 4) of step `step`.
HSRING_HOST_DEVICE inline void gaussian4(uint64_t seed, uint64_t step, uint64_t group,
                                         float out[4]) {
  uint32_t c[4] = {uint32_t(group), uint32_t(group >> 32), uint32_t(step), uint32_t(step >> 32)};
  philox4x32_10(c, uint32_t(seed), uint32_t(seed >> 32));
  for (int pair = 0; pair < 2; ++pair) {
    const float radius = sqrtf(-2.0f * logf(uniform_open(c[2 * pair])));
    const float angle = 6.2831853f * uniform_open(c[2 * pair + 1]);
    out[2 * pair] = radius * cosf(angle);
    out[2 * pair + 1] = radius * sinf(angle);
  }
}

}  // namespace hsring::gpu
