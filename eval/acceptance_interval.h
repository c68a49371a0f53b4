// A confidence interval for tau (tokens per verifying target forward) over a set of
// prompts: a seeded percentile bootstrap that resamples prompts and recomputes tau as a
// ratio of sums, since tau weights each prompt by its forwards, not equally.
#pragma once

#include <cstdint>
#include <span>

namespace hsring::eval {

// What one prompt contributes to tau: tokens produced by its verifying forwards, and their
// number.
struct PromptTally {
  uint64_t tokens = 0;
  uint64_t forwards = 0;
};

struct AcceptanceInterval {
  double level = 0;  // e.g. 0.95
  double low = 0, high = 0;
};

inline constexpr double kAcceptanceIntervalLevel = 0.95;
inline constexpr uint32_t kBootstrapResamples = 4000;
inline constexpr uint64_t kBootstrapSeed = 0x7A75;

// The `level` percentile interval of sum(tokens) / sum(forwards) over `resamples` draws of
// prompts.size() prompts with replacement (SplitMix64 from `seed`): the same tallies give
// the same interval. One prompt, or none, gives [tau, tau]. A resample without a forward
// counts as tau 0 (cannot happen when every prompt has one).
// REQUIRES: 0 < level < 1, resamples > 0.
AcceptanceInterval bootstrap_acceptance_interval(std::span<const PromptTally> prompts,
                                                 double level = kAcceptanceIntervalLevel,
                                                 uint32_t resamples = kBootstrapResamples,
                                                 uint64_t seed = kBootstrapSeed);

}  // namespace hsring::eval
