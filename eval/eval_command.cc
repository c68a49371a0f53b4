#include "eval/eval_command.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "builtin/pretrain.h"
#include "common/error.h"
#include "common/text_file.h"
#include "eval/cpu_evaluate.h"
#include "eval/gpu_decode_flags.h"
#include "eval/speculative_decode.h"
#if HSRING_HAVE_CUDA
#include "eval/gpu_eval.h"
#endif
#include "train/dflash_params.h"

namespace hsring::eval {
namespace {

// --dump-block: the first block of the first prompt, its context and its logits.
void dump_first_block(CpuTargetModel& target, const checkpoint::DflashExport& drafter,
                      std::span<const int32_t> prompt, uint32_t threads, const std::string& path) {
  const ModelWeights& w = target.weights();
  train::DflashModel model(drafter.config, {w.embed_tokens, w.lm_head_or_embeddings()}, 0, threads);
  std::copy(drafter.params.begin(), drafter.params.end(), model.params().begin());
  const DraftedBlock b =
      first_block(target, model, drafter.layer_ids, prompt, w.lm_head_or_embeddings());
  const size_t vocab = target.config().vocab_size;
  nlohmann::json j;
  j["prompt"] = std::vector<int32_t>(prompt.begin(), prompt.end());
  j["context_length"] = b.context_length;
  j["anchor"] = b.anchor;
  j["layer_ids"] = drafter.layer_ids;
  j["block_size"] = drafter.config.block_size;
  j["mask_token_id"] = drafter.config.mask_token_id;
  j["drafts"] = b.drafts;
  j["logits"] = nlohmann::json::array();
  for (size_t r = 0; r < b.drafts.size(); ++r)
    j["logits"].push_back(std::vector<float>(b.logits.begin() + std::ptrdiff_t(r * vocab),
                                             b.logits.begin() + std::ptrdiff_t((r + 1) * vocab)));
  write_file_atomically(path, j.dump() + "\n");
}

// Prints the text report, writes the JSON one when asked; 0, or 1 when the output is not
// plain greedy decoding's.
int report_eval(const EvalReport& report, const std::string& json_path) {
  std::cout << eval_report_text(report) << std::flush;
  if (!json_path.empty()) write_file_atomically(json_path, eval_report_json(report));
  return !report.sampling.greedy() || report.matches_greedy ? 0 : 1;
}

}  // namespace

TrainedAgainstUntrained evaluate_against_untrained(const std::string& model, uint64_t model_seed,
                                                   const std::string& export_dir,
                                                   uint64_t train_seed, const PromptChoice& prompts,
                                                   uint32_t threads, int gpu) {
  const checkpoint::DflashExport trained = checkpoint::read_dflash_export(export_dir);
  const ModelConfig config = model_config_of(model);
  check_drafter_fits(config, trained);
  const ChosenPrompts chosen = choose_prompts(prompts, model, config.vocab_size);
  checkpoint::DflashExport untrained = trained;
  train::init_dflash_params<float>(untrained.layout, train_seed, untrained.params);
  TrainedAgainstUntrained result;
  const size_t few = std::min<size_t>(kUntrainedPrompts, chosen.prompts.size());
  if (gpu >= 0) {
#if HSRING_HAVE_CUDA
    const auto target = open_cuda_model(model, model_seed, gpu);
    const TargetHead head = load_target_head(model, model_seed);
    const GpuEvalOptions defaults;
    result.trained = evaluate_on_gpu(*target, head, trained, chosen.prompts, kDefaultMaxNewTokens,
                                     defaults.group);
    result.untrained =
        evaluate_on_gpu(*target, head, untrained, std::span(chosen.prompts).first(few),
                        kDefaultMaxNewTokens, defaults.group);
    result.prompts = chosen.description;
    return result;
#else
    throw Error(
        Errc::kUsage,
        fmt::format("GPU {}: this hsring was built without CUDA and cannot evaluate on it", gpu));
#endif
  }
  const auto target = open_cpu_model(model, model_seed, {threads});
  result.trained = evaluate(*target, trained, chosen.prompts, kDefaultMaxNewTokens, threads);
  result.untrained = evaluate(*target, untrained, std::span(chosen.prompts).first(few),
                              kDefaultMaxNewTokens, threads);
  result.prompts = chosen.description;
  return result;
}

int run_eval(const EvalOptions& options) {
  if (options.drafter.empty()) throw Error(Errc::kUsage, "eval needs --drafter EXPORT_DIR");
  if (const std::string problem = sampling_problem(options.sampling); !problem.empty())
    throw Error(Errc::kUsage, "eval: " + problem);
  const checkpoint::DflashExport drafter = checkpoint::read_dflash_export(options.drafter);
  const std::string model = builtin::resolve_model_spec(options.model);
  // Before any weight is drawn or read: a mismatched 8B target would cost minutes.
  const ModelConfig config = model_config_of(model);
  check_drafter_fits(config, drafter);
  const ChosenPrompts chosen = choose_prompts(options.prompts, options.model, config.vocab_size);
  std::cout << "eval: drafter " << options.drafter << " (" << train::describe(drafter.config)
            << ") against " << config.name << ", " << chosen.prompts.size()
            << " prompts: " << chosen.description << ", " << options.max_new_tokens
            << " new tokens each by " << describe_decoding(options.sampling) << ", on "
            << (options.gpu >= 0 ? fmt::format("GPU {}", options.gpu) : std::string("the CPU"))
            << "\n";
  if (options.gpu >= 0) {
#if HSRING_HAVE_CUDA
    if (!options.dump_block.empty()) throw Error(Errc::kUsage, "--dump-block runs on the CPU only");
    return report_eval(evaluate_on_gpu({model, options.model_seed, options.gpu, options.gpu_group,
                                        options.sampling},
                                       drafter, chosen.prompts, options.max_new_tokens),
                       options.json_path);
#else
    throw Error(Errc::kUsage,
                fmt::format("--gpu: GPU {} cannot be used: this hsring was built without CUDA; "
                            "rebuild it on a machine with /usr/local/cuda, or leave --gpu out to "
                            "evaluate on the CPU",
                            options.gpu));
#endif
  }
  const auto target = open_cpu_model(model, options.model_seed, {options.threads});
  if (!options.dump_block.empty())
    dump_first_block(*target, drafter, chosen.prompts.front().tokens, options.threads,
                     options.dump_block);
  return report_eval(evaluate(*target, drafter, chosen.prompts, options.max_new_tokens,
                              options.threads, options.sampling),
                     options.json_path);
}

bool EvalCommand::selected() const { return command_ && *command_; }

int EvalCommand::run() const { return run_eval(*options_); }

EvalCommand add_eval_command(CLI::App& app) {
  EvalCommand command;
  command.options_ = std::make_shared<EvalOptions>();
  EvalOptions& o = *command.options_;
  CLI::App* eval = app.add_subcommand(
      "eval",
      "Measure a DFlash export's acceptance length by speculative decoding (CPU, or --gpu)");
  command.command_ = eval;
  eval->add_option("--model", o.model, "Target model: a preset or a Hugging Face folder")
      ->capture_default_str();
  eval->add_option("--model-seed", o.model_seed, "Seed of a preset model's random weights")
      ->capture_default_str();
  eval->add_option("--drafter", o.drafter, "DFlash export folder (config.json, model.safetensors)")
      ->required();
  eval->add_option("--prompts", o.prompts.prompts,
                   "Prompts: a token-shard folder (each document's tokens before its first "
                   "trained label, or all of it) or JSONL chats (rendered by `hsring data "
                   "prepare --prompts-only`); default: held-out documents");
  eval->add_option("--data", o.prompts.data,
                   "Token-shard folder whose held-out documents (its last one in 16, at most "
                   "64) give the prompts (default: the built-in corpus's held-out part)");
  eval->add_option("--max-prompts", o.prompts.max_prompts, "At most this many prompts")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  eval->add_option("--prompt-tokens", o.prompts.prompt_tokens,
                   "Tokens of each held-out prompt (not of --prompts)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  eval->add_option("--max-new-tokens", o.max_new_tokens, "Tokens generated per prompt")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  eval->add_option("--temperature", o.sampling.temperature,
                   "0: greedy verification (the default); > 0: speculative sampling at this "
                   "temperature (drafts sampled from the drafter, the standard acceptance rule)")
      ->capture_default_str();
  eval->add_option("--top-p", o.sampling.top_p,
                   "With --temperature: sample from the smallest set of tokens whose probability "
                   "reaches P, for target and drafter alike (1: off)")
      ->capture_default_str();
  eval->add_option("--seed", o.sampling.seed,
                   "With --temperature: the sampling seed (the same seed, the same tokens)")
      ->capture_default_str();
  eval->add_option("--threads", o.threads, "CPU threads (0: all)")->capture_default_str();
  add_gpu_decode_flags(*eval, o.gpu, o.gpu_group,
                       "Decode on this GPU (CUDA target and drafter, many prompts at a time), "
                       "timed against plain greedy decoding there");
  eval->add_option("--json", o.json_path, "Also write the report as JSON to PATH");
  // Hidden: for the reference test only (tests/reference).
  eval->add_option("--dump-block", o.dump_block,
                   "Write the first prompt's first drafted block (context, anchor, logits) as "
                   "JSON to PATH")
      ->group("");
  return command;
}

}  // namespace hsring::eval
