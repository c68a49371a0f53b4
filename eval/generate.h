// `hsring data generate`: target-generated training data. Each document of a prompt corpus
// is continued by the target's plain greedy decoding (greedy_decode), or by seeded
// sampling (sample_decode, eval/sampling.h), and written as prompt + continuation, with a loss mask
// that counts only the continuation, so a drafter learns to draft what the target itself says (as
// SpecForge regenerates responses).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/shard_set_writer.h"
#include "eval/sampling.h"
#include "model/target_model.h"

namespace CLI {
class App;
}

namespace hsring::eval {

struct GenerateOptions {
  std::string model;  // a preset, a Hugging Face folder or "builtin" (required)
  uint64_t model_seed = 0;
  std::string data;             // the prompt shards (required)
  std::string out_dir;          // new or empty (required)
  uint32_t max_new_tokens = 0;  // > 0 (required)
  uint32_t prompt_tokens = 0;   // a prompt is a document's first N tokens; 0: all of it
  // Decoding stops after one of these; empty: the model's eos_token_id (config.json,
  // generation_config.json) when it has one.
  std::vector<int32_t> stop_tokens;
  // --temperature, --top-p, --seed: greedy by default. A prompt's draws are keyed by its
  // place among the non-empty prompt documents, so a resumed run samples what an
  // uninterrupted one would.
  SamplingOptions sampling;
  uint32_t threads = 0;  // 0: every hardware thread
  int gpu = -1;          // >= 0: decode on this GPU, `gpu_group` prompts at a time
  uint32_t gpu_group = 64;
  // --resume: continue the run a kill interrupted in out_dir (its generate.json must be these
  // options'); resume_after is the number of non-empty prompts its finished shards hold.
  bool resume = false;
  uint64_t resume_after = 0;
  uint64_t shard_tokens = data::kDefaultShardTokens;
};

struct GenerateSummary {
  uint64_t documents = 0;         // written: one per non-empty prompt document
  uint64_t skipped = 0;           // empty prompt documents, left out
  uint64_t prompt_tokens = 0;     // masked out
  uint64_t generated_tokens = 0;  // counted by the mask
  uint64_t stopped = 0;           // continuations that ended at a stop token
  std::vector<std::string> shard_paths;
};

// How prompts are continued: each prompt's continuation, in order. `first_prompt` is the
// first one's index among the corpus's non-empty documents (the key of its sampling).
using Continuer = std::function<std::vector<std::vector<int32_t>>(
    std::span<const std::vector<int32_t>> prompts, uint64_t first_prompt)>;

// Continues every document of `prompts` (shard order, then document order) with
// `continuer`, `chunk` prompts a call, and adds prompt + continuation to `out`, the prompt
// masked out, then finishes `out`. `progress(done, total)` is called after each call.
// Throws Error (kData..., kModel...).
GenerateSummary generate_continuations(
    const data::Corpus& prompts, const GenerateOptions& options, const Continuer& continuer,
    size_t chunk, data::ShardSetWriter& out,
    const std::function<void(uint64_t, uint64_t)>& progress = {});

// The CPU's: each prompt by greedy_decode(target, prompt, max_new_tokens, stop_tokens), or
// sample_decode when options.sampling is not greedy.
GenerateSummary generate_continuations(
    TargetModel& target, const data::Corpus& prompts, const GenerateOptions& options,
    data::ShardSetWriter& out, const std::function<void(uint64_t, uint64_t)>& progress = {});

// The stop tokens a model folder declares: eos_token_id (a number or a list) of its
// config.json and generation_config.json; none for a preset. Throws Error(kModel).
std::vector<int32_t> model_stop_tokens(const std::string& spec);

// Checks the options (naming the flag at fault; Error(kUsage)), loads the model and
// the prompts, generates, prints progress and a summary. Returns 0; throws on errors.
int run_data_generate(const GenerateOptions& options);

class GenerateCommand {
 public:
  bool selected() const;  // after parsing: was `data generate` given?
  int run() const;        // REQUIRES: selected()

 private:
  friend GenerateCommand add_generate_command(CLI::App& data);
  CLI::App* command_ = nullptr;
  std::shared_ptr<GenerateOptions> options_;  // CLI11 binds to its fields: they must not move
};

// Adds `generate` and its flags to the `data` command `data`.
GenerateCommand add_generate_command(CLI::App& data);

}  // namespace hsring::eval
