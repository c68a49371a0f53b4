#include "eval/acceptance_interval.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/contract.h"
#include "common/random.h"

namespace hsring::eval {
namespace {

double ratio(uint64_t tokens, uint64_t forwards) {
  return forwards ? double(tokens) / double(forwards) : 0.0;
}

}  // namespace

AcceptanceInterval bootstrap_acceptance_interval(std::span<const PromptTally> prompts, double level,
                                                 uint32_t resamples, uint64_t seed) {
  HSRING_REQUIRE(level > 0 && level < 1 && resamples > 0);
  AcceptanceInterval interval{.level = level};
  uint64_t tokens = 0, forwards = 0;
  for (const PromptTally& p : prompts) {
    tokens += p.tokens;
    forwards += p.forwards;
  }
  interval.low = interval.high = ratio(tokens, forwards);
  if (prompts.size() < 2) return interval;

  std::vector<double> taus(resamples);
  uint64_t state = seed;
  for (double& tau : taus) {
    uint64_t t = 0, f = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const PromptTally& p = prompts[splitmix64(state) % prompts.size()];
      t += p.tokens;
      f += p.forwards;
    }
    tau = ratio(t, f);
  }
  std::sort(taus.begin(), taus.end());
  // Percentiles by the nearest rank below/above: (1 - level) / 2 of the draws lie outside
  // each end.
  const double tail = (1 - level) / 2 * double(resamples);
  const size_t lo = size_t(std::floor(tail));
  const size_t hi =
      std::min(size_t(resamples) - 1, size_t(std::ceil(double(resamples) - tail)) - 1);
  interval.low = taus[lo];
  interval.high = taus[hi];
  return interval;
}

}  // namespace hsring::eval
