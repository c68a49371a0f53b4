// The sampler of eval/sampling.h: speculative sampling emits the target's own distribution
// (chi-square over a fixed set of seeds, so the test is deterministic), in one block and
// across the blocks of a whole decode; top-p keeps the smallest set reaching P; the draws
// are keyed, not counted; and on the tiny target, sampling at a temperature near 0 is
// greedy decoding, speculative or plain.
#include "eval/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "builtin/pretrain.h"
#include "eval/speculative_decode.h"
#include "model/cpu_target_model.h"
#include "train/dflash_config.h"
#include "train/dflash_model.h"

namespace hsring::eval {
namespace {

// Logits whose softmax at temperature 1 is `probs` (0: -inf, never drawn).
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> out;
  for (const double p : probs) out.push_back(p > 0 ? float(std::log(p)) : -INFINITY);
  return out;
}

// Pearson's chi-square of `counts` (N draws) against `expected` probabilities, over the
// cells of positive probability; a draw in a cell of probability 0 fails the test at once.
double chi_square(const std::vector<uint64_t>& counts, const std::vector<double>& expected) {
  uint64_t n = 0;
  for (const uint64_t c : counts) n += c;
  double chi = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] == 0) {
      EXPECT_EQ(counts[i], 0u) << "token " << i << " has probability 0";
      continue;
    }
    const double e = double(n) * expected[i];
    chi += (double(counts[i]) - e) * (double(counts[i]) - e) / e;
  }
  return chi;
}

constexpr uint64_t kDraws = 20000;

SamplingOptions at_temperature_1(uint64_t seed) { return {1.0, 1.0, seed}; }

// One block of one draft: the emitted token (the accepted draft, or the residual's sample)
// is distributed as p, whatever q, including tokens q never drafts and drafts p never makes.
TEST(SpeculativeSamplingTest, OneDraftEmitsTheTargetsDistribution) {
  const std::vector<double> p = {0.45, 0.25, 0.2, 0.1, 0.0};
  const std::vector<double> q = {0.1, 0.5, 0.0, 0.2, 0.2};
  const std::vector<float> q_logits = logits_of(q);
  std::vector<float> target = logits_of(p);                               // row 0: the draft's p
  const std::vector<float> bonus = logits_of({0.2, 0.2, 0.2, 0.2, 0.2});  // row 1: the bonus's
  target.insert(target.end(), bonus.begin(), bonus.end());

  std::vector<uint64_t> emitted(p.size(), 0), drafted(p.size(), 0);
  uint64_t accepted = 0;
  for (uint64_t seed = 0; seed < kDraws; ++seed) {
    const PromptSampler sampler(at_temperature_1(seed), 0);
    std::vector<std::vector<double>> qs(1);
    const int32_t x = sampler.sample_draft(q_logits, 1, qs[0]);
    const BlockVerdict v = sampler.verify_block(0, std::vector<int32_t>{x}, qs, target);
    ++drafted[size_t(x)];
    accepted += v.accepted;
    ++emitted[size_t(v.accepted == 1 ? x : v.next)];
  }
  // df 3: P(chi-square > 16.3) = 0.001.
  EXPECT_LT(chi_square(emitted, p), 16.3);
  // The bound can fail: the drafts alone (q, far from p) score far above it.
  std::vector<uint64_t> drafted_in_p(drafted);
  drafted_in_p[4] = 0;  // q's token 4 is impossible under p: leave it out to score the rest
  EXPECT_GT(chi_square(drafted_in_p, p), 1000.0);
  // Acceptance rate sum_x min(p, q) = 0.1 + 0.25 + 0 + 0.1 + 0 = 0.45.
  EXPECT_NEAR(double(accepted) / kDraws, 0.45, 0.02);
}

// A toy target, a Markov chain over 4 tokens, and a toy DFlash drafter whose q for block
// position j depends only on the anchor and j (as a DFlash block's does: its drafts are
// drawn in parallel), decoded speculatively exactly as speculative_decode does, blocks of 3
// rows, 3 new tokens. The joint distribution of the 3 tokens is the chain's: the rule is
// lossless across blocks, and the keyed draws stay fresh when a later block reuses rows an
// earlier one drew for.
TEST(SpeculativeSamplingTest, AWholeDecodeEmitsTheTargetsJointDistribution) {
  constexpr size_t kVocab = 4, kBlock = 3, kNew = 3;
  const std::vector<std::vector<double>> chain = {
      {0.5, 0.3, 0.15, 0.05}, {0.1, 0.6, 0.2, 0.1}, {0.25, 0.25, 0.25, 0.25}, {0.7, 0.0, 0.1, 0.2}};
  const auto draft_probs = [](int32_t anchor, size_t j) {
    std::vector<double> q = {0.25, 0.25, 0.25, 0.25};
    q[size_t(anchor + int32_t(j)) % kVocab] += 0.4;  // a drafter that is often wrong
    for (double& v : q) v /= 1.4;
    return q;
  };
  const int32_t prompt = 2;
  std::map<std::vector<int32_t>, uint64_t> counts;
  for (uint64_t seed = 0; seed < kDraws; ++seed) {
    const PromptSampler sampler(at_temperature_1(1000 + seed), 7);
    std::vector<int32_t> seq = {prompt};
    const size_t max_length = 1 + kNew;
    seq.push_back(sampler.sample_target(logits_of(chain[size_t(prompt)]), seq.size()));
    while (seq.size() < max_length) {
      const size_t s = seq.size() - 1, v = std::min(kBlock, max_length - s);
      std::vector<int32_t> drafts;
      std::vector<std::vector<double>> q(v - 1);
      for (size_t j = 1; j < v; ++j)
        drafts.push_back(sampler.sample_draft(logits_of(draft_probs(seq[s], j)), s + j, q[j - 1]));
      // The target's rows: after the anchor, then after each draft.
      std::vector<float> target = logits_of(chain[size_t(seq[s])]);
      for (const int32_t d : drafts) {
        const std::vector<float> row = logits_of(chain[size_t(d)]);
        target.insert(target.end(), row.begin(), row.end());
      }
      const BlockVerdict verdict = sampler.verify_block(s, drafts, q, target);
      for (size_t j = 0; j < verdict.accepted && seq.size() < max_length; ++j)
        seq.push_back(drafts[j]);
      if (seq.size() < max_length) seq.push_back(verdict.next);
    }
    ++counts[std::vector<int32_t>(seq.begin() + 1, seq.end())];
  }
  std::vector<uint64_t> observed;
  std::vector<double> expected;
  for (int32_t a = 0; a < int32_t(kVocab); ++a)
    for (int32_t b = 0; b < int32_t(kVocab); ++b)
      for (int32_t c = 0; c < int32_t(kVocab); ++c) {
        observed.push_back(counts[{a, b, c}]);
        expected.push_back(chain[size_t(prompt)][size_t(a)] * chain[size_t(a)][size_t(b)] *
                           chain[size_t(b)][size_t(c)]);
      }
  // 64 cells, 8 of probability 0 (token 1 never follows token 3): df 55;
  // P(chi-square > 93) is about 0.001.
  EXPECT_LT(chi_square(observed, expected), 93.0);
}

TEST(SamplingDistributionTest, TopPKeepsTheSmallestSetReachingPAndRenormalises) {
  const std::vector<float> logits = logits_of({0.15, 0.5, 0.05, 0.3});
  std::vector<double> probs;
  const auto at = [&](double top_p) {
    sampling_distribution(logits, {1.0, top_p, 0}, probs);
    return probs;
  };
  const std::vector<double> only_first = at(0.45);
  EXPECT_DOUBLE_EQ(only_first[1], 1.0);
  EXPECT_EQ(only_first[0] + only_first[2] + only_first[3], 0.0);
  const std::vector<double> two = at(0.79);  // 0.5 + 0.3 reach it
  EXPECT_NEAR(two[1], 0.5 / 0.8, 1e-6);
  EXPECT_NEAR(two[3], 0.3 / 0.8, 1e-6);
  EXPECT_EQ(two[0] + two[2], 0.0);
  const std::vector<double> three = at(0.9);
  EXPECT_NEAR(three[0], 0.15 / 0.95, 1e-6);
  EXPECT_EQ(three[2], 0.0);
  const std::vector<double> all = at(1.0);
  EXPECT_NEAR(all[2], 0.05, 1e-6);
  // Ties go to the lower token id, so the cut is deterministic.
  sampling_distribution(logits_of({0.25, 0.25, 0.25, 0.25}), {1.0, 0.3, 0}, probs);
  EXPECT_EQ(probs, (std::vector<double>{0.5, 0.5, 0.0, 0.0}));
}

TEST(SamplingDistributionTest, TemperatureSharpensAndNearZeroIsTheArgmax) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.9f, -5.0f};
  std::vector<double> hot, cold;
  sampling_distribution(logits, {2.0, 1.0, 0}, hot);
  sampling_distribution(logits, {0.5, 1.0, 0}, cold);
  EXPECT_NEAR(hot[1] / hot[0], std::exp(2.0 / 2.0), 1e-9);
  EXPECT_NEAR(cold[1] / cold[0], std::exp(2.0 / 0.5), 1e-9);
  for (uint64_t seed = 0; seed < 200; ++seed)
    EXPECT_EQ(PromptSampler({1e-4, 1.0, seed}, 0).sample_target(logits, 5), 1);
}

TEST(SamplerTest, DrawsAreKeyedByWhatTheyAreFor) {
  const double u = uniform_draw(1, 2, 3, DrawUse::kDraft);
  EXPECT_EQ(u, uniform_draw(1, 2, 3, DrawUse::kDraft));
  EXPECT_NE(u, uniform_draw(2, 2, 3, DrawUse::kDraft));
  EXPECT_NE(u, uniform_draw(1, 3, 3, DrawUse::kDraft));
  EXPECT_NE(u, uniform_draw(1, 2, 4, DrawUse::kDraft));
  EXPECT_NE(u, uniform_draw(1, 2, 3, DrawUse::kAccept));
  double sum = 0;
  for (uint64_t row = 0; row < 10000; ++row) {
    const double v = uniform_draw(9, 0, row, DrawUse::kTarget);
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
    sum += v;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.01);
  // Inverse CDF: a token of probability 0 is never returned, even at the ends.
  const std::vector<double> probs = {0.0, 0.4, 0.0, 0.6, 0.0};
  EXPECT_EQ(sample_from(probs, 0.0), 1);
  EXPECT_EQ(sample_from(probs, 0.39), 1);
  EXPECT_EQ(sample_from(probs, 0.41), 3);
  EXPECT_EQ(sample_from(probs, std::nextafter(1.0, 0.0)), 3);
}

TEST(SamplerTest, BadOptionsNameTheFlag) {
  EXPECT_EQ(sampling_problem({}), "");
  EXPECT_EQ(sampling_problem({0.7, 0.9, 3}), "");
  EXPECT_NE(sampling_problem({-0.1, 1.0, 0}).find("--temperature"), std::string::npos);
  EXPECT_NE(sampling_problem({NAN, 1.0, 0}).find("--temperature"), std::string::npos);
  EXPECT_NE(sampling_problem({1.0, 0.0, 0}).find("--top-p"), std::string::npos);
  EXPECT_NE(sampling_problem({1.0, 1.01, 0}).find("--top-p"), std::string::npos);
  EXPECT_NE(sampling_problem({1.0, NAN, 0}).find("--top-p"), std::string::npos);
}

// On the built-in trained target with a random drafter, decoding at temperature 1e-4 is
// greedy decoding, speculative and plain; at temperature 1 it is not, and it is seeded.
TEST(SampledDecodingTest, NearZeroTemperatureIsGreedyAndSeedsReproduce) {
  const auto target = open_cpu_model(builtin::resolve_model_spec(builtin::kBuiltinModel), 0, {2});
  const ModelConfig& tc = target->config();
  const ModelWeights& w = target->weights();
  train::DflashConfig dc = train::default_dflash_config(tc, 2, 1);
  dc.block_size = 4;
  train::DflashModel drafter(dc, {w.embed_tokens, w.lm_head_or_embeddings()}, 3, 2);
  const std::vector<int32_t> layers = default_capture_layers(tc.num_layers, 2);
  const std::string text = "The drafter reads the ring";
  const std::vector<int32_t> prompt(text.begin(), text.end());
  constexpr uint32_t kNew = 14;
  const std::vector<int32_t> greedy = greedy_decode(*target, prompt, kNew);

  const auto speculative = [&](const SamplingOptions& o, uint64_t index) {
    const DraftSampling draw{PromptSampler(o, index), w.lm_head_or_embeddings()};
    return speculative_decode(*target, drafter, layers, prompt, kNew, &draw);
  };
  const SpeculativeResult cold = speculative({1e-4, 1.0, 5}, 0);
  EXPECT_EQ(cold.tokens, greedy);
  EXPECT_EQ(sample_decode(*target, prompt, kNew, PromptSampler({1e-4, 1.0, 5}, 0)), greedy);
  // The greedy decoder's own accounting: the same steps.
  EXPECT_EQ(cold.produced, speculative_decode(*target, drafter, layers, prompt, kNew).produced);

  const SpeculativeResult hot = speculative({1.0, 0.95, 5}, 0);
  EXPECT_EQ(hot.tokens.size(), kNew);
  EXPECT_NE(hot.tokens, greedy);
  EXPECT_EQ(speculative({1.0, 0.95, 5}, 0).tokens, hot.tokens);
  EXPECT_NE(speculative({1.0, 0.95, 6}, 0).tokens, hot.tokens);
  EXPECT_NE(speculative({1.0, 0.95, 5}, 1).tokens, hot.tokens);
  const std::vector<int32_t> plain =
      sample_decode(*target, prompt, kNew, PromptSampler({1.0, 0.95, 5}, 0));
  EXPECT_EQ(plain.size(), kNew);
  EXPECT_EQ(sample_decode(*target, prompt, kNew, PromptSampler({1.0, 0.95, 5}, 0)), plain);
}

}  // namespace
}  // namespace hsring::eval
