// `hsring eval`: measures a DFlash export's acceptance length by real speculative decoding
// against a CPU target on held-out or given prompts, checks the output against plain greedy
// decoding, and reports tau with its bootstrap interval, each block position's acceptance
// rate and the ideal speed-up (text, and JSON with --json). main() registers it with
// add_eval_command() and runs it after parsing; `hsring run` ends with
// evaluate_against_untrained.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "eval/eval_prompts.h"
#include "eval/eval_report.h"
#include "eval/sampling.h"

namespace CLI {
class App;
}

namespace hsring::eval {

// New tokens per prompt by default: many short continuations tell drafters apart better
// than a few long ones at the same cost (tau's interval is over prompts).
inline constexpr uint32_t kDefaultMaxNewTokens = 32;

struct EvalOptions {
  std::string model = "builtin";  // preset, Hugging Face folder, or the built-in trained target
  uint64_t model_seed = 0;        // a preset's random weights, as `hsring run --model-seed`
  std::string drafter;            // a DFlash export folder (required)
  PromptChoice prompts;           // --prompts, --data, --max-prompts, --prompt-tokens
  uint32_t max_new_tokens = kDefaultMaxNewTokens;
  SamplingOptions sampling;  // --temperature, --top-p, --seed; greedy by default
  uint32_t threads = 0;      // 0: every hardware thread
  int gpu = -1;              // >= 0: decode on this GPU (eval/gpu_eval.h), not the CPU
  uint32_t gpu_group = 16;   // --gpu: prompts decoded together, one forward each step
  std::string json_path;
  // Hidden (--dump-block PATH): the first block drafted for the first prompt, as JSON, for
  // the reference test (tests/reference, docs/dflash-export.md "Checked against the reference").
  std::string dump_block;
};

// The end of a training run: the export in `export_dir` decoded on the prompts `prompts`
// names (by default those of `hsring eval` without flags) against `model`, and the same
// drafter at the weights it started from (init_dflash_params with `train_seed`) on the
// first kUntrainedPrompts of them: its tau is ~1 whatever the prompts, and at one target
// forward per token it would cost most of the evaluation.
inline constexpr uint32_t kUntrainedPrompts = 8;
struct TrainedAgainstUntrained {
  EvalReport trained, untrained;
  std::string prompts;  // where the prompts came from (ChosenPrompts::description)
};
TrainedAgainstUntrained evaluate_against_untrained(const std::string& model, uint64_t model_seed,
                                                   const std::string& export_dir,
                                                   uint64_t train_seed,
                                                   const PromptChoice& prompts = {},
                                                   uint32_t threads = 0, int gpu = -1);

// Loads everything, evaluates, prints the text report and writes the JSON one. Returns 0,
// or 1 when a greedy run's output differs from plain greedy decoding; throws on setup
// errors (Error(kUsage) for bad sampling flags, before anything is read; a missing or
// malformed export, a drafter that does not fit the target, bad prompts).
int run_eval(const EvalOptions& options);

class EvalCommand {
 public:
  bool selected() const;  // after parsing: was `eval` given?
  int run() const;        // REQUIRES: selected()

 private:
  friend EvalCommand add_eval_command(CLI::App& app);
  CLI::App* command_ = nullptr;
  std::shared_ptr<EvalOptions> options_;  // CLI11 binds to its fields: they must not move
};

// Adds `eval` and its flags to `app`.
EvalCommand add_eval_command(CLI::App& app);

}  // namespace hsring::eval
