#include "eval/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "common/contract.h"
#include "common/random.h"

namespace hsring::eval {

namespace {

std::string shortest(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace

std::string sampling_problem(const SamplingOptions& o) {
  if (!std::isfinite(o.temperature) || o.temperature < 0)
    return "--temperature must be a finite number >= 0 (0: greedy decoding), not " +
           shortest(o.temperature);
  if (!(o.top_p > 0 && o.top_p <= 1))
    return "--top-p must be in (0, 1] (1: no nucleus cut), not " + shortest(o.top_p);
  return "";
}

std::string describe_decoding(const SamplingOptions& o) {
  if (o.greedy()) return "greedy decoding";
  char text[128];
  std::snprintf(text, sizeof text, "sampling (temperature %g, top-p %g, seed %llu)", o.temperature,
                o.top_p, static_cast<unsigned long long>(o.seed));
  return text;
}

double uniform_draw(uint64_t seed, uint64_t prompt, uint64_t row, DrawUse use) {
  // Each part of the key goes through a full splitmix64 round before the next is mixed in,
  // so keys that differ in any one part give unrelated streams.
  uint64_t h = mix64(seed ^ 0x243F6A8885A308D3ull);
  h = mix64(h ^ prompt);
  h = mix64(h ^ row);
  h = mix64(h ^ uint64_t(use));
  return double(h >> 11) * 0x1.0p-53;
}

void sampling_distribution(std::span<const float> logits, const SamplingOptions& o,
                           std::vector<double>& probs) {
  HSRING_REQUIRE(!o.greedy() && !logits.empty());
  const size_t vocab = logits.size();
  probs.resize(vocab);
  // Double throughout: a temperature near 0 scales logit gaps by 1/T, and the softmax
  // must still put (almost) all the mass on the argmax rather than overflow.
  double top = -INFINITY;
  for (const float l : logits) top = std::max(top, double(l));
  double total = 0;
  for (size_t v = 0; v < vocab; ++v) {
    probs[v] = std::exp((double(logits[v]) - top) / o.temperature);
    total += probs[v];
  }
  for (double& p : probs) p /= total;
  if (o.top_p >= 1) return;
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return probs[size_t(a)] > probs[size_t(b)]; });
  // Keep a token while the mass before it is under top_p: the smallest prefix reaching it
  // (the reference dflash package's rule; the most probable token is always kept).
  double before = 0, kept = 0;
  size_t keep = 0;
  while (keep < vocab && before < o.top_p) {
    before += probs[size_t(order[keep])];
    ++keep;
  }
  for (size_t i = keep; i < vocab; ++i) probs[size_t(order[i])] = 0;
  for (size_t i = 0; i < keep; ++i) kept += probs[size_t(order[i])];
  for (size_t i = 0; i < keep; ++i) probs[size_t(order[i])] /= kept;
}

int32_t sample_from(std::span<const double> probs, double u) {
  double total = 0;
  for (const double p : probs) total += p;
  HSRING_REQUIRE(total > 0);
  const double threshold = u * total;
  double cumulative = 0;
  int32_t last = -1;
  for (size_t v = 0; v < probs.size(); ++v) {
    if (probs[v] <= 0) continue;
    cumulative += probs[v];
    last = int32_t(v);
    if (cumulative > threshold) return last;
  }
  return last;  // u * total rounded up to the sum: the last token that has mass
}

PromptSampler::PromptSampler(const SamplingOptions& options, uint64_t prompt)
    : options_(options), prompt_(prompt) {
  HSRING_REQUIRE(sampling_problem(options).empty() && !options.greedy());
}

int32_t PromptSampler::sample_target(std::span<const float> logits, uint64_t row) const {
  std::vector<double> p;
  sampling_distribution(logits, options_, p);
  return sample_from(p, uniform_draw(options_.seed, prompt_, row, DrawUse::kTarget));
}

int32_t PromptSampler::sample_draft(std::span<const float> logits, uint64_t row,
                                    std::vector<double>& q) const {
  sampling_distribution(logits, options_, q);
  return sample_from(q, uniform_draw(options_.seed, prompt_, row, DrawUse::kDraft));
}

BlockVerdict PromptSampler::verify_block(uint64_t anchor_row, std::span<const int32_t> drafts,
                                         std::span<const std::vector<double>> q,
                                         std::span<const float> target_logits) const {
  HSRING_REQUIRE(q.size() == drafts.size());
  HSRING_REQUIRE(target_logits.size() % (drafts.size() + 1) == 0);
  const size_t vocab = target_logits.size() / (drafts.size() + 1);
  std::vector<double> p;
  for (size_t j = 1; j <= drafts.size(); ++j) {
    const uint64_t row = anchor_row + j;
    sampling_distribution(target_logits.subspan((j - 1) * vocab, vocab), options_, p);
    const auto x = size_t(drafts[j - 1]);
    const std::vector<double>& qj = q[j - 1];
    HSRING_REQUIRE(qj.size() == vocab && x < vocab && qj[x] > 0);
    // Accept with probability min(1, p(x) / q(x)): u < p / q, written without dividing.
    if (uniform_draw(options_.seed, prompt_, row, DrawUse::kAccept) * qj[x] < p[x]) continue;
    std::vector<double> residual(vocab);
    double mass = 0;
    for (size_t v = 0; v < vocab; ++v) mass += residual[v] = std::max(0.0, p[v] - qj[v]);
    // A rejection has probability sum(max(0, q - p)) = sum(max(0, p - q)): a residual of
    // no mass means p == q up to rounding, where the rule samples from p.
    const std::span<const double> from = mass > 0 ? std::span<const double>(residual) : p;
    return {j - 1, sample_from(from, uniform_draw(options_.seed, prompt_, row, DrawUse::kTarget))};
  }
  const uint64_t bonus_row = anchor_row + drafts.size() + 1;
  return {drafts.size(),
          sample_target(target_logits.subspan(drafts.size() * vocab, vocab), bonus_row)};
}

}  // namespace hsring::eval
