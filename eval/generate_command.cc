// `hsring data generate`: flags, their checks, progress and the summary.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "builtin/pretrain.h"
#include "common/error.h"
#include "common/text_file.h"
#include "eval/generate.h"
#include "eval/gpu_decode_flags.h"
#include "model/cpu_target_model.h"
#if HSRING_HAVE_CUDA
#include "eval/gpu_target_runner.h"
#endif

namespace hsring::eval {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void usage(const std::string& what) {
  throw Error(Errc::kUsage, "data generate: " + what);
}

// Before any weight is read: a wrong flag should not cost a model load.
void check_flags(const GenerateOptions& o) {
  if (o.model.empty()) usage("--model is required (a preset, a Hugging Face folder or builtin)");
  if (o.data.empty()) usage("--data is required (a folder of prompt token shards)");
  if (o.out_dir.empty()) usage("-o/--out is required (a new or empty folder)");
  if (o.max_new_tokens == 0) usage("--max-new-tokens must be at least 1");
  if (o.shard_tokens == 0) usage("--shard-tokens must be at least 1");
  if (const std::string problem = sampling_problem(o.sampling); !problem.empty()) usage(problem);
  std::error_code ec;
  if (!fs::is_directory(o.data, ec)) usage("--data " + o.data + " is not a folder");
  if (fs::exists(o.out_dir, ec)) {
    if (!fs::is_directory(o.out_dir, ec)) usage("-o " + o.out_dir + " exists and is not a folder");
    if (!o.resume && !fs::is_empty(o.out_dir, ec))
      usage("-o " + o.out_dir +
            " exists and is not empty; choose a new or empty folder, or give --resume to "
            "continue the `data generate` that was interrupted there");
    if (fs::equivalent(o.out_dir, o.data, ec)) usage("-o " + o.out_dir + " is the --data folder");
  }
}

// What makes a generate run's output: a resumed run must be the same run.
std::string run_record(const GenerateOptions& o, uint32_t vocab_size) {
  std::error_code ec;
  const fs::path data = fs::absolute(o.data, ec);
  nlohmann::json record{{"model", o.model},
                        {"model_seed", o.model_seed},
                        {"data", data.lexically_normal().string()},
                        {"prompt_tokens", o.prompt_tokens},
                        {"max_new_tokens", o.max_new_tokens},
                        {"stop_tokens", o.stop_tokens},
                        {"vocab_size", vocab_size},
                        {"decoder", o.gpu >= 0 ? "gpu" : "cpu"}};
  // Only sampled runs name their sampling: a greedy run's record stays what it was, so a run
  // begun before these flags existed still resumes.
  if (!o.sampling.greedy()) {
    record["temperature"] = o.sampling.temperature;
    record["top_p"] = o.sampling.top_p;
    record["seed"] = o.sampling.seed;
  }
  return record.dump(2) + "\n";
}

// The shard writer of a fresh run (its record written first) or of a resumed one (its
// record checked, its finished shards kept).
data::ShardSetWriter open_output(GenerateOptions& o, uint32_t vocab_size) {
  const std::string record_path = (fs::path(o.out_dir) / "generate.json").string();
  const std::string record = run_record(o, vocab_size);
  const uint32_t width = data::token_bytes_for(vocab_size);
  std::error_code ec;
  const bool started = fs::exists(o.out_dir, ec) && !fs::is_empty(o.out_dir, ec);
  if (!o.resume || !started) {
    fs::create_directories(o.out_dir, ec);
    write_file_atomically(record_path, record);
    return data::ShardSetWriter(o.out_dir, width, vocab_size, o.shard_tokens);
  }
  const std::optional<std::string> before = read_file_if_exists(record_path);
  if (!before)
    usage("--resume: " + o.out_dir + " holds no generate.json: it was not written by `hsring " +
          "data generate`; choose a new or empty folder");
  if (*before != record)
    usage("--resume: " + record_path + " records another run:\n" + *before +
          "this one would be:\n" + record + "give the same flags, or choose a new folder");
  data::ShardSetWriter out =
      data::ShardSetWriter::resume(o.out_dir, width, vocab_size, o.shard_tokens);
  o.resume_after = out.summary().documents;
  return out;
}

// On the CPU one prompt at a time; on a GPU (GpuTargetRunner: packed forwards through a KV
// cache where the model has one) gpu_group at a time. `loaded()` once the model is.
GenerateSummary generate(const GenerateOptions& o, const data::Corpus& prompts,
                         data::ShardSetWriter& out,
                         const std::function<void(uint64_t, uint64_t)>& progress,
                         const std::function<void()>& loaded) {
  if (o.gpu < 0) {
    const auto target = open_cpu_model(o.model, o.model_seed, {o.threads});
    loaded();
    return generate_continuations(*target, prompts, o, out, progress);
  }
#if HSRING_HAVE_CUDA
  const auto target = open_cuda_model(o.model, o.model_seed, o.gpu);
  GpuTargetRunner runner(*target, {});
  loaded();
  const Continuer on_gpu = [&](std::span<const std::vector<int32_t>> chunk, uint64_t first) {
    return runner.greedy_decode(chunk, o.max_new_tokens, o.stop_tokens, o.gpu_group, o.sampling,
                                first);
  };
  return generate_continuations(prompts, o, on_gpu, o.gpu_group, out, progress);
#else
  usage(
      fmt::format("--gpu {}: this hsring was built without CUDA; rebuild it on a machine with "
                  "/usr/local/cuda, or leave --gpu out to generate on the CPU",
                  o.gpu));
#endif
}

}  // namespace

int run_data_generate(const GenerateOptions& given) {
  check_flags(given);
  GenerateOptions o = given;
  o.model = builtin::resolve_model_spec(o.model);
  const ModelConfig config = model_config_of(o.model);
  if (o.stop_tokens.empty()) o.stop_tokens = model_stop_tokens(o.model);
  for (const int32_t id : o.stop_tokens)
    if (id < 0 || uint32_t(id) >= config.vocab_size)
      usage(fmt::format("stop token {} is outside the vocabulary of {} of {}", id,
                        config.vocab_size, config.name));
  const data::Corpus prompts = data::Corpus::open(o.data);
  if (const std::string problem = data::vocabulary_problem(prompts, config.vocab_size, given.model);
      !problem.empty())
    usage("--data: " + problem);
  std::string stops;
  for (const int32_t id : o.stop_tokens) stops += (stops.empty() ? "" : " ") + std::to_string(id);
  std::cout << "generate: " << prompts.doc_count() << " prompt documents from " << o.data << ", "
            << o.max_new_tokens << " new tokens each by " << describe_decoding(o.sampling)
            << " with " << config.name << " (stop tokens: " << (stops.empty() ? "none" : stops)
            << ") on " << (o.gpu >= 0 ? fmt::format("GPU {}", o.gpu) : std::string("the CPU"))
            << "\n"
            << std::flush;

  data::ShardSetWriter out = open_output(o, config.vocab_size);
  if (o.resume_after > 0)
    std::cout << "generate: resuming after the " << o.resume_after << " documents of "
              << out.summary().shard_paths.size() << " finished shards in " << o.out_dir << "\n"
              << std::flush;
  auto start = std::chrono::steady_clock::now();
  auto last = start;
  const auto seconds_since = [](auto t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  const auto progress = [&](uint64_t done, uint64_t total) {
    if (done != total && seconds_since(last) < 2.0) return;
    last = std::chrono::steady_clock::now();
    std::printf("generate: %llu/%llu documents, %.1f s\n", static_cast<unsigned long long>(done),
                static_cast<unsigned long long>(total), seconds_since(start));
    std::fflush(stdout);
  };
  const GenerateSummary s = generate(o, prompts, out, progress, [&] {
    std::printf("generate: the model loaded in %.1f s\n", seconds_since(start));
    start = last = std::chrono::steady_clock::now();  // the progress times decoding alone
  });
  std::cout << "generated " << s.generated_tokens << " tokens after " << s.prompt_tokens
            << " prompt tokens in " << s.documents << " documents (" << s.stopped
            << " ended at a stop token, " << s.skipped << " empty prompts skipped) into "
            << s.shard_paths.size() << " shards in " << o.out_dir
            << (o.resume_after ? fmt::format(" ({} before, resumed)", o.resume_after) : "")
            << "; the loss mask counts the generated tokens only\n";
  return 0;
}

bool GenerateCommand::selected() const { return command_ && *command_; }

int GenerateCommand::run() const { return run_data_generate(*options_); }

GenerateCommand add_generate_command(CLI::App& data) {
  GenerateCommand command;
  command.options_ = std::make_shared<GenerateOptions>();
  GenerateOptions& o = *command.options_;
  CLI::App* g = data.add_subcommand(
      "generate",
      "Continue each prompt document with the target's greedy decoding (or seeded sampling); "
      "write shards whose loss mask counts the generated tokens only");
  command.command_ = g;
  g->add_option("--model", o.model, "Target: a preset, a Hugging Face folder, or builtin")
      ->required();
  g->add_option("--model-seed", o.model_seed, "Seed of a preset model's random weights")
      ->capture_default_str();
  g->add_option("--data", o.data, "Folder of prompt token shards")->required();
  g->add_option("-o,--out", o.out_dir, "Folder for the shards (new or empty)")->required();
  g->add_option("--max-new-tokens", o.max_new_tokens, "Tokens generated per document")
      ->required()
      ->check(CLI::PositiveNumber);
  g->add_option("--prompt-tokens", o.prompt_tokens,
                "Prompt: each document's first N tokens; 0: the whole document")
      ->capture_default_str();
  g->add_option("--temperature", o.sampling.temperature,
                "0: greedy decoding (the default); > 0: sample at this temperature")
      ->capture_default_str();
  g->add_option("--top-p", o.sampling.top_p,
                "With --temperature: sample from the smallest set of tokens whose probability "
                "reaches P (1: off)")
      ->capture_default_str();
  g->add_option("--seed", o.sampling.seed,
                "With --temperature: the sampling seed (the same seed, the same shards)")
      ->capture_default_str();
  g->add_option("--stop-token", o.stop_tokens,
                "Stop after this token (repeatable); default: the model's eos_token_id");
  g->add_option("--shard-tokens", o.shard_tokens, "Most tokens in one shard")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  add_gpu_decode_flags(*g, o.gpu, o.gpu_group,
                       "Decode on this GPU (the CUDA target, many prompts at a time, a KV cache "
                       "for attention-only models)");
  g->add_flag("--resume", o.resume,
              "Continue the run a kill interrupted in -o (the same flags): its finished shards "
              "are kept, the rest is generated again");
  g->add_option("--threads", o.threads, "CPU threads of the target forward (0: all)")
      ->capture_default_str();
  return command;
}

}  // namespace hsring::eval
