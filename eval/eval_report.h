// What an evaluation reports, whatever decoded it (the CPU, eval/cpu_evaluate.h; a GPU,
// eval/gpu_eval.h): each prompt's speculative and greedy decodings summed up into tau with
// its bootstrap interval, each block position's acceptance rate and the greedy check
// (summarise_decoding), then written as text or JSON.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "eval/acceptance_interval.h"
#include "eval/eval_prompts.h"
#include "eval/sampling.h"
#include "eval/speculative_decode.h"

namespace hsring::eval {

// One prompt of an evaluation.
struct PromptResult {
  uint32_t index = 0;                           // the prompt's place in the evaluated list
  std::string source;                           // where the prompt came from (EvalPrompt::source)
  std::vector<int32_t> prompt, output, greedy;  // output: speculative; greedy: plain (greedy
                                                // runs only)
  std::vector<uint32_t> produced;               // tokens per verifying forward
  double acceptance_length = 0;
  bool matches_greedy = false;  // greedy runs only
};

struct EvalReport {
  SamplingOptions sampling;  // how the tokens were chosen (greedy by default)
  uint32_t block_size = 0;
  double acceptance_length = 0;  // tau: tokens per verifying target forward, over all prompts
  AcceptanceInterval acceptance_length_interval;  // bootstrap over the prompts
  // Positions 1 .. B - 1: of the steps that verified position j, the fraction whose drafts
  // 1 .. j were all accepted.
  std::vector<double> position_acceptance;
  // Plain greedy's forwards per token (1) over speculative decoding's, drafting free and a
  // block's verification costing one decode step: tau.
  double ideal_speedup = 0;
  // Greedy runs: every prompt's output equals plain greedy decoding. A sampled run has no
  // greedy output to equal: false, and the reports leave it out.
  bool matches_greedy = true;
  uint64_t target_forwards = 0, generated_tokens = 0;
  // hsring eval --gpu: the wall time of each decoding of every prompt (0: not timed): the
  // speculative one and the plain one (greedy, or sampling at the run's settings). Their
  // ratio is the speed-up seen on that GPU, drafting and verification included.
  double speculative_seconds = 0, greedy_seconds = 0;
  std::vector<PromptResult> prompts;
};

// The report of decoding `prompts` speculatively (`speculative`, one per prompt, moved from)
// and plainly (`greedy`, one per prompt) with a drafter of `block_size`, whatever decoded
// them: each prompt's result keeps its index and source, then tau with its interval, the
// position acceptance and the greedy check over all of them. A run sampled by `sampling`
// has no greedy check: `greedy` is empty.
// REQUIRES: as many speculative results as prompts, and as many greedy outputs for a greedy
// run (none for a sampled one); each SpeculativeResult's verified and accepted hold
// block_size counts.
EvalReport summarise_decoding(std::span<const EvalPrompt> prompts,
                              std::span<SpeculativeResult> speculative,
                              std::span<const std::vector<int32_t>> greedy, uint32_t block_size,
                              const SamplingOptions& sampling = {});

// The JSON report: decoding ("greedy" or "sampling"), temperature, top_p and seed (sampled
// runs), acceptance_length, acceptance_length_interval [lo, hi] and
// acceptance_length_interval_level, position_acceptance, ideal_speedup, matches_greedy
// (greedy runs), block_size, target_forwards, generated_tokens and prompts (each: index,
// source, prompt, output, greedy and matches_greedy (greedy runs), produced,
// acceptance_length).
std::string eval_report_json(const EvalReport& report);
// The text report, a few lines.
std::string eval_report_text(const EvalReport& report);
// "2.953 (95% interval 2.71-3.20)": tau with its interval, for one-line reports.
std::string format_acceptance_length(double tau, const AcceptanceInterval& interval);

}  // namespace hsring::eval
