#include "eval/eval_command.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "builtin/pretrain.h"
#include "common/error.h"
#include "common/text_file.h"
#include "data/default_corpus.h"
#include "data/token_batch.h"
#include "eval/speculative_decode.h"
#if HSRING_HAVE_CUDA
#include "eval/gpu_eval.h"
#endif
#include "train/dflash_params.h"

namespace hsring::eval {
namespace {

[[noreturn]] void bad_input(const std::string& what) { throw Error(Errc::kModelBadInput, what); }

// The drafter must read the very target it was trained against: its width, vocabulary and
// layer numbering.
void check_fits(const ModelConfig& target, const checkpoint::DflashExport& drafter) {
  const train::DflashConfig& c = drafter.config;
  if (c.target_hidden != target.hidden_size)
    bad_input("the drafter's hidden_size " + std::to_string(c.target_hidden) + " is not target " +
              target.name + "'s " + std::to_string(target.hidden_size) +
              ": it was trained against another model");
  if (c.vocab_size != target.vocab_size)
    bad_input("the drafter's vocab_size " + std::to_string(c.vocab_size) + " is not target " +
              target.name + "'s " + std::to_string(target.vocab_size));
  if (drafter.num_target_layers != target.num_layers)
    bad_input("the drafter's num_target_layers " + std::to_string(drafter.num_target_layers) +
              " is not target " + target.name + "'s " + std::to_string(target.num_layers) +
              " layers");
}

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
  return report.matches_greedy ? 0 : 1;
}

}  // namespace

std::vector<std::vector<int32_t>> held_out_prompts(const data::Corpus& corpus, uint32_t count,
                                                   uint32_t prompt_tokens) {
  std::vector<std::vector<int32_t>> prompts;
  const auto& shards = corpus.shards();
  for (size_t si = shards.size(); si-- > 0 && prompts.size() < count;) {
    const data::ShardInfo& shard = shards[si];
    for (size_t d = shard.doc_offsets.size() - 1; d-- > 0 && prompts.size() < count;) {
      const uint64_t begin = shard.doc_offsets[d], end = shard.doc_offsets[d + 1];
      if (end - begin < prompt_tokens || prompt_tokens == 0) continue;
      const data::Piece piece{uint32_t(si), prompt_tokens, begin};
      data::BatchRef ref;
      ref.pieces = std::span<const data::Piece>(&piece, 1);
      ref.token_count = prompt_tokens;
      prompts.push_back(data::read_batch(corpus, ref).tokens);
    }
  }
  if (prompts.empty())
    throw Error(Errc::kDataEmptyCorpus, "corpus " + corpus.dir() + " has no document of at least " +
                                            std::to_string(prompt_tokens) + " tokens for a prompt");
  return prompts;
}

EvalReport summarise_decoding(std::span<const std::vector<int32_t>> prompts,
                              std::span<SpeculativeResult> speculative,
                              std::span<const std::vector<int32_t>> greedy, uint32_t block_size) {
  EvalReport report;
  const size_t bs = block_size;
  report.block_size = block_size;
  std::vector<uint64_t> verified(bs, 0), accepted(bs, 0);
  uint64_t produced_sum = 0, steps = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SpeculativeResult& r = speculative[i];
    PromptResult p;
    p.prompt = prompts[i];
    p.output = std::move(r.tokens);
    p.greedy = greedy[i];
    p.matches_greedy = p.output == p.greedy;
    p.produced = std::move(r.produced);
    uint64_t sum = 0;
    for (const uint32_t n : p.produced) sum += n;
    p.acceptance_length = p.produced.empty() ? 0 : double(sum) / double(p.produced.size());
    produced_sum += sum;
    steps += p.produced.size();
    for (size_t j = 0; j < bs; ++j) {
      verified[j] += r.verified[j];
      accepted[j] += r.accepted[j];
    }
    report.matches_greedy = report.matches_greedy && p.matches_greedy;
    report.target_forwards += 1 + p.produced.size();  // the prefill, then one per step
    report.generated_tokens += p.output.size();
    report.prompts.push_back(std::move(p));
  }
  report.acceptance_length = steps ? double(produced_sum) / double(steps) : 0;
  for (size_t j = 1; j < bs; ++j)
    report.position_acceptance.push_back(verified[j] ? double(accepted[j]) / double(verified[j])
                                                     : 0);
  report.ideal_speedup = report.acceptance_length;
  return report;
}

EvalReport evaluate(CpuTargetModel& target, const checkpoint::DflashExport& drafter,
                    std::span<const std::vector<int32_t>> prompts, uint32_t max_new_tokens,
                    uint32_t threads) {
  check_fits(target.config(), drafter);
  const ModelWeights& w = target.weights();
  train::DflashModel model(drafter.config, {w.embed_tokens, w.lm_head_or_embeddings()}, 0, threads);
  std::copy(drafter.params.begin(), drafter.params.end(), model.params().begin());
  std::vector<SpeculativeResult> speculative;
  std::vector<std::vector<int32_t>> greedy;
  for (const std::vector<int32_t>& prompt : prompts) {
    speculative.push_back(
        speculative_decode(target, model, drafter.layer_ids, prompt, max_new_tokens));
    greedy.push_back(greedy_decode(target, prompt, max_new_tokens));
  }
  return summarise_decoding(prompts, speculative, greedy, drafter.config.block_size);
}

std::string eval_report_json(const EvalReport& report) {
  nlohmann::json j;
  j["acceptance_length"] = report.acceptance_length;
  j["position_acceptance"] = report.position_acceptance;
  j["ideal_speedup"] = report.ideal_speedup;
  j["matches_greedy"] = report.matches_greedy;
  j["block_size"] = report.block_size;
  j["target_forwards"] = report.target_forwards;
  j["generated_tokens"] = report.generated_tokens;
  if (report.speculative_seconds > 0 && report.greedy_seconds > 0) {
    const double tokens = double(report.generated_tokens);
    j["speculative_tokens_per_s"] = tokens / report.speculative_seconds;
    j["greedy_tokens_per_s"] = tokens / report.greedy_seconds;
    j["measured_speedup"] = report.greedy_seconds / report.speculative_seconds;
  }
  j["prompts"] = nlohmann::json::array();
  for (const PromptResult& p : report.prompts)
    j["prompts"].push_back({{"prompt", p.prompt},
                            {"output", p.output},
                            {"greedy", p.greedy},
                            {"produced", p.produced},
                            {"acceptance_length", p.acceptance_length},
                            {"matches_greedy", p.matches_greedy}});
  return j.dump(2) + "\n";
}

std::string eval_report_text(const EvalReport& report) {
  std::ostringstream s;
  char line[128];
  std::snprintf(line, sizeof line, "acceptance length (tau) %.3f tokens per target forward\n",
                report.acceptance_length);
  s << line;
  s << "position acceptance (1.." << (report.block_size - 1) << "):";
  for (const double a : report.position_acceptance) {
    std::snprintf(line, sizeof line, " %.2f", a);
    s << line;
  }
  std::snprintf(line, sizeof line,
                "\nideal speed-up %.2fx (drafting free, verification as one decode step)\n",
                report.ideal_speedup);
  s << line;
  if (report.speculative_seconds > 0 && report.greedy_seconds > 0) {
    const double tokens = double(report.generated_tokens);
    std::snprintf(line, sizeof line,
                  "on the GPU: speculative %.1f tokens/s, plain greedy %.1f tokens/s: %.2fx\n",
                  tokens / report.speculative_seconds, tokens / report.greedy_seconds,
                  report.greedy_seconds / report.speculative_seconds);
    s << line;
  }
  size_t matched = 0;
  for (const PromptResult& p : report.prompts) matched += p.matches_greedy;
  s << "matches greedy: " << (report.matches_greedy ? "yes" : "NO") << " (" << matched << " of "
    << report.prompts.size() << " prompts; " << report.generated_tokens << " tokens, "
    << report.target_forwards << " target forwards)\n";
  return s.str();
}

TrainedAgainstUntrained evaluate_against_untrained(const std::string& model, uint64_t model_seed,
                                                   const std::string& export_dir,
                                                   uint64_t train_seed, uint32_t prompts,
                                                   uint32_t threads) {
  const EvalOptions defaults;
  const checkpoint::DflashExport trained = checkpoint::read_dflash_export(export_dir);
  check_fits(model_config_of(model), trained);
  const auto target = open_cpu_model(model, model_seed, {threads});
  const data::Corpus corpus = data::Corpus::open(data::default_heldout_dir());
  const auto chosen = held_out_prompts(corpus, prompts, defaults.prompt_tokens);
  checkpoint::DflashExport untrained = trained;
  train::init_dflash_params<float>(untrained.layout, train_seed, untrained.params);
  TrainedAgainstUntrained result;
  result.trained = evaluate(*target, trained, chosen, defaults.max_new_tokens, threads);
  result.untrained = evaluate(*target, untrained, chosen, defaults.max_new_tokens, threads);
  return result;
}

int run_eval(const EvalOptions& options) {
  if (options.drafter.empty()) throw Error(Errc::kUsage, "eval needs --drafter EXPORT_DIR");
  const checkpoint::DflashExport drafter = checkpoint::read_dflash_export(options.drafter);
  const std::string model = train::resolve_model_spec(options.model);
  // Before any weight is drawn or read: a mismatched 8B target would cost minutes.
  const ModelConfig target_config = model_config_of(model);
  check_fits(target_config, drafter);
  // The built-in corpus's held-out part, which no built-in training run reads.
  const data::Corpus corpus = options.data.empty() ? data::Corpus::open(data::default_heldout_dir())
                                                   : data::open_token_data(options.data);
  if (const std::string problem =
          data::vocabulary_problem(corpus, target_config.vocab_size, options.model);
      !problem.empty())
    throw Error(Errc::kDataBadOptions, problem);
  const auto prompts = held_out_prompts(corpus, options.prompts, options.prompt_tokens);
  std::cout << "eval: drafter " << options.drafter << " (" << train::describe(drafter.config)
            << ") against " << target_config.name << ", " << prompts.size() << " prompts of "
            << options.prompt_tokens << " tokens from " << corpus.dir() << ", "
            << options.max_new_tokens << " new tokens each, on "
            << (options.gpu >= 0 ? "GPU " + std::to_string(options.gpu) : std::string("the CPU"))
            << "\n";
  if (options.gpu >= 0) {
#if HSRING_HAVE_CUDA
    if (!options.dump_block.empty()) throw Error(Errc::kUsage, "--dump-block runs on the CPU only");
    const EvalReport report =
        evaluate_on_gpu({model, options.model_seed, options.gpu, options.gpu_group}, drafter,
                        prompts, options.max_new_tokens);
    return report_eval(report, options.json_path);
#else
    throw Error(Errc::kUsage, "--gpu: GPU " + std::to_string(options.gpu) +
                                  " cannot be used: this hsring was built without CUDA; rebuild "
                                  "it on a machine with /usr/local/cuda, or leave --gpu out to "
                                  "evaluate on the CPU");
#endif
  }
  const auto target = open_cpu_model(model, options.model_seed, {options.threads});
  if (!options.dump_block.empty())
    dump_first_block(*target, drafter, prompts.front(), options.threads, options.dump_block);
  const EvalReport report = evaluate(*target, drafter, prompts, options.max_new_tokens,
                                     options.threads == 0 ? 0 : options.threads);
  return report_eval(report, options.json_path);
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
  eval->add_option("--data", o.data,
                   "Token-shard folder for the prompts (default: built-in corpus)");
  eval->add_option("--prompts", o.prompts, "Prompts: the corpus's last documents")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  eval->add_option("--prompt-tokens", o.prompt_tokens, "Tokens of each prompt")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  eval->add_option("--max-new-tokens", o.max_new_tokens, "Tokens generated per prompt")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  eval->add_option("--threads", o.threads, "CPU threads (0: all)")->capture_default_str();
  eval->add_option("--gpu", o.gpu,
                   "Decode on this GPU (CUDA target and drafter, many prompts at a time), "
                   "timed against plain greedy decoding there")
      ->check(CLI::NonNegativeNumber);
  eval->add_option("--gpu-group", o.gpu_group, "With --gpu: prompts decoded together")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  eval->add_option("--json", o.json_path, "Also write the report as JSON to PATH");
  // Hidden: for the reference test only (tests/reference).
  eval->add_option("--dump-block", o.dump_block,
                   "Write the first prompt's first drafted block (context, anchor, logits) as "
                   "JSON to PATH")
      ->group("");
  return command;
}

}  // namespace hsring::eval
