// `hsring eval`: measures a DFlash export's acceptance length by real speculative decoding
// against a CPU target on held-out prompts, checks the output against plain greedy decoding,
// and reports tau, each block position's acceptance rate and the ideal speed-up (text, and
// JSON with --json). main() registers it with add_eval_command() and runs it after parsing.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/dflash_export.h"
#include "data/corpus.h"
#include "eval/speculative_decode.h"
#include "model/cpu_target_model.h"

namespace CLI {
class App;
}

namespace hsring::eval {

struct EvalOptions {
  std::string model = "builtin";  // preset, Hugging Face folder, or the built-in trained target
  uint64_t model_seed = 0;        // a preset's random weights, as `hsring run --model-seed`
  std::string drafter;            // a DFlash export folder (required)
  std::string data;               // a token-shard folder; "": the built-in corpus
  uint32_t prompts = 8;
  uint32_t prompt_tokens = 64;
  uint32_t max_new_tokens = 64;
  uint32_t threads = 0;     // 0: every hardware thread
  int gpu = -1;             // >= 0: decode on this GPU (eval/gpu_eval.h), not the CPU
  uint32_t gpu_group = 16;  // --gpu: prompts decoded together, one forward each step
  std::string json_path;
  // Hidden (--dump-block PATH): the first block drafted for the first prompt, as JSON, for
  // the reference test (tests/reference, docs/dflash-export.md "Checked against the reference").
  std::string dump_block;
};

struct PromptResult {
  std::vector<int32_t> prompt, output, greedy;  // output: speculative; greedy: plain
  std::vector<uint32_t> produced;               // tokens per verifying forward
  double acceptance_length = 0;
  bool matches_greedy = false;
};

struct EvalReport {
  uint32_t block_size = 0;
  double acceptance_length = 0;  // tau: tokens per verifying target forward, over all prompts
  // Positions 1 .. B - 1: of the steps that verified position j, the fraction whose drafts
  // 1 .. j were all accepted.
  std::vector<double> position_acceptance;
  // Plain greedy's forwards per token (1) over speculative decoding's, drafting free and a
  // block's verification costing one decode step: tau.
  double ideal_speedup = 0;
  bool matches_greedy = true;  // every prompt's output equals plain greedy decoding
  uint64_t target_forwards = 0, generated_tokens = 0;
  // hsring eval --gpu: the wall time of each decoding of every prompt (0: not timed). Their
  // ratio is the speed-up seen on that GPU, drafting and verification included.
  double speculative_seconds = 0, greedy_seconds = 0;
  std::vector<PromptResult> prompts;
};

// The report of decoding `prompts` speculatively (`speculative`, one per prompt) and
// plainly (`greedy`, one per prompt) with a drafter of `block_size`.
EvalReport summarise_decoding(std::span<const std::vector<int32_t>> prompts,
                              std::span<SpeculativeResult> speculative,
                              std::span<const std::vector<int32_t>> greedy, uint32_t block_size);

// The evaluation prompts: the first `prompt_tokens` tokens of each of the last `count`
// documents of `corpus` (shard order, then document order) that hold at least that many,
// last document first. These documents are the held-out set (docs/drafter-training.md).
// Throws Error when no document is long enough or a read fails.
std::vector<std::vector<int32_t>> held_out_prompts(const data::Corpus& corpus, uint32_t count,
                                                   uint32_t prompt_tokens);

// Decodes every prompt speculatively with `drafter` (its embedding and LM head: the
// target's) and plainly, and sums up. Throws Error(kBadInput) when the drafter does
// not fit the target (width, vocabulary, layer count) or a prompt does.
EvalReport evaluate(CpuTargetModel& target, const checkpoint::DflashExport& drafter,
                    std::span<const std::vector<int32_t>> prompts, uint32_t max_new_tokens,
                    uint32_t threads = 1);

// The JSON report: acceptance_length, position_acceptance, ideal_speedup, matches_greedy,
// block_size, target_forwards, generated_tokens and prompts (each: prompt, output, greedy,
// produced, acceptance_length, matches_greedy).
std::string eval_report_json(const EvalReport& report);
// The text report, a few lines.
std::string eval_report_text(const EvalReport& report);

// The end of a training run: the export in `export_dir` and the same drafter at the weights
// it started from (init_dflash_params with `train_seed`), both decoded on `prompts`
// held-out prompts of the built-in corpus against `model`.
struct TrainedAgainstUntrained {
  EvalReport trained, untrained;
};
TrainedAgainstUntrained evaluate_against_untrained(const std::string& model, uint64_t model_seed,
                                                   const std::string& export_dir,
                                                   uint64_t train_seed, uint32_t prompts,
                                                   uint32_t threads = 0);

// Loads everything, evaluates, prints the text report and writes the JSON one. Returns 0,
// or 1 when the output differs from plain greedy decoding; throws on setup errors (a
// missing or malformed export, a drafter that does not fit the target, a bad corpus).
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
