// Seeded temperature / top-p sampling, shared by every decoder (`hsring eval` and `hsring
// data generate`, on the CPU and on a GPU): the distribution a logits row is sampled from,
// a random stream keyed by what each draw is for rather than by how many draws came before
// it, and the speculative sampling rule of Leviathan et al. and Chen et al. (2023) for a
// DFlash block. docs/sampling.md says what is drawn where, and why.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hsring::eval {

// The flags --temperature, --top-p and --seed of both commands.
struct SamplingOptions {
  double temperature = 0;  // 0: greedy decoding (argmax, the first on ties); else > 0
  double top_p = 1;        // in (0, 1]; 1: no nucleus cut
  uint64_t seed = 0;
  bool greedy() const { return temperature == 0; }
};

// "" when `options` are valid, else what is wrong, naming the flag (--temperature must be a
// finite number >= 0, --top-p in (0, 1]). Callers turn it into Error(kUsage).
std::string sampling_problem(const SamplingOptions& options);

// "greedy decoding", or "sampling (temperature 0.7, top-p 0.9, seed 1)": for progress lines.
std::string describe_decoding(const SamplingOptions& options);

// What a uniform draw decides. Every draw of a decode is keyed by (seed, prompt index,
// sequence row, use): a token's randomness does not depend on how many prompts decode
// together, on thread counts, or on what an earlier rejected block drew (whose draws past
// its first rejection were never looked at, so reusing their keys later is still fresh).
enum class DrawUse : uint64_t {
  kTarget = 1,  // a token sampled from the target (a plain step, a residual or a bonus)
  kDraft = 2,   // a draft token sampled from the drafter
  kAccept = 3,  // the acceptance test of the draft at that row
};

// A uniform double in [0, 1), a pure function of its key (a splitmix64 chain, 53 bits).
double uniform_draw(uint64_t seed, uint64_t prompt, uint64_t row, DrawUse use);

// `probs` <- the distribution `logits` (one row of V) is sampled from: softmax(logits / T)
// in double, then, when top_p < 1, the smallest set of most probable tokens whose
// probability sums to at least top_p (ties by lower token id), renormalised; every other
// token gets 0. REQUIRES: !options.greedy(), logits not empty.
void sampling_distribution(std::span<const float> logits, const SamplingOptions& options,
                           std::vector<double>& probs);

// The token of `probs` (non-negative, not all 0, need not sum to 1) at uniform `u`: the
// first whose cumulative probability exceeds u times their sum (inverse CDF). A token of
// probability 0 is never returned.
int32_t sample_from(std::span<const double> probs, double u);

// How one DFlash block was settled: `accepted` drafts kept (0 .. drafts), then `next`, the
// token after them (sampled from the residual at the first rejected row, or the bonus).
struct BlockVerdict {
  size_t accepted = 0;
  int32_t next = 0;
};

// One prompt's sampler: its options and its index (the key of its draws).
// Thread safety: const and stateless; share it freely.
class PromptSampler {
 public:
  // REQUIRES: sampling_problem(options) is "" and !options.greedy().
  PromptSampler(const SamplingOptions& options, uint64_t prompt);

  // The token at sequence row `row`, sampled from the target's logits row that predicts it
  // (the logits of row - 1).
  int32_t sample_target(std::span<const float> logits, uint64_t row) const;

  // The draft of row `row`, sampled from the drafter's logits row for it; `q` <- the
  // distribution it was sampled from, which verify_block needs.
  int32_t sample_draft(std::span<const float> logits, uint64_t row, std::vector<double>& q) const;

  // The speculative sampling rule over the block anchored at row `anchor_row`: draft j
  // (drafts[j - 1], at row anchor_row + j, drawn from q[j - 1]) is accepted with
  // probability min(1, p_j(x) / q_j(x)), p_j being the target's distribution from
  // target_logits row j - 1; at the first rejection the next token is sampled from
  // normalise(max(0, p_j - q_j)) (p_j where that is all 0 by rounding), and when every
  // draft is accepted it is the bonus, sampled from target_logits row drafts.size().
  // The emitted tokens are then distributed as the target's own sampling (lossless).
  // REQUIRES: q.size() == drafts.size(), target_logits holds drafts.size() + 1 rows of V.
  BlockVerdict verify_block(uint64_t anchor_row, std::span<const int32_t> drafts,
                            std::span<const std::vector<double>> q,
                            std::span<const float> target_logits) const;

  const SamplingOptions& options() const { return options_; }

 private:
  SamplingOptions options_;
  uint64_t prompt_ = 0;
};

}  // namespace hsring::eval
