#include "eval/builtin_data.h"

#include <cstdio>
#include <filesystem>

#include "builtin/pretrain.h"
#include "common/cached_folder.h"
#include "common/crc32.h"
#include "common/error.h"
#include "data/corpus.h"
#include "data/default_corpus.h"
#include "data/shard_set_writer.h"
#include "eval/generate.h"
#include "model/cpu_target_model.h"

namespace hsring::eval {

namespace fs = std::filesystem;

namespace {

// Bump kRules when the generation or its options change, so no binary reuses another's data.
std::string data_tag(const fs::path& target_dir) {
  constexpr std::string_view kRules = "hsring-builtin-data:v1";
  const std::string key = std::string(kRules) + ":" + target_dir.filename().string() + ":" +
                          std::to_string(kBuiltinPromptTokens) + ":" +
                          std::to_string(kBuiltinNewTokens);
  char tag[16];
  std::snprintf(tag, sizeof tag, "%08x", crc32(key.data(), key.size()));
  return tag;
}

bool holds_shards(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  try {
    (void)data::Corpus::open(dir.string());
    return true;
  } catch (const Error&) {
    return false;
  }
}

// The built-in target's continuations of one part of the built-in corpus, cached.
std::string continuations_dir(const std::string& cache_root, data::BuiltinSplit split,
                              const std::function<void(uint64_t, uint64_t)>& progress) {
  const fs::path root = cache_root.empty() ? data::default_cache_root() : cache_root;
  const fs::path target_dir = builtin::builtin_target_dir(root.string());
  const bool training = split == data::BuiltinSplit::kTraining;
  const fs::path dir =
      root / ((training ? "builtin-data-" : "builtin-heldout-data-") + data_tag(target_dir));
  return cached_folder(
             dir, holds_shards,
             [&](const fs::path& staging) {
               const data::Corpus prompts =
                   data::Corpus::open(training ? data::default_corpus_dir(root.string())
                                               : data::default_heldout_dir(root.string()));
               GenerateOptions options;
               options.model = target_dir.string();
               options.prompt_tokens = kBuiltinPromptTokens;
               options.max_new_tokens = kBuiltinNewTokens;  // byte-level: no end-of-text token
               const auto target = open_cpu_model(options.model, 0, {options.threads});
               const uint32_t vocab = target->config().vocab_size;
               data::ShardSetWriter out(staging.string(), data::token_bytes_for(vocab), vocab,
                                        options.shard_tokens);
               generate_continuations(*target, prompts, options, out, progress);
             },
             Errc::kData)
      .string();
}

}  // namespace

std::string builtin_data_dir(const std::string& cache_root,
                             const std::function<void(uint64_t, uint64_t)>& progress) {
  return continuations_dir(cache_root, data::BuiltinSplit::kTraining, progress);
}

std::string builtin_heldout_data_dir(const std::string& cache_root) {
  return continuations_dir(cache_root, data::BuiltinSplit::kHeldOut, {});
}

std::string resolve_builtin_data() {
  bool said = false;
  return builtin_data_dir("", [&](uint64_t done, uint64_t total) {
    if (!said)
      std::fprintf(stderr,
                   "[hsring] generating the built-in data: the built-in target continues each "
                   "corpus document (first use only; ~40 s on two cores)\n");
    said = true;
    if (done % 20 == 0 || done == total)
      std::fprintf(stderr, "[hsring]   %llu/%llu documents\n", (unsigned long long)done,
                   (unsigned long long)total);
  });
}

RunData resolve_run_data(const std::string& data, const std::string& model_spec) {
  if (data == kBuiltinData || (data.empty() && model_spec == builtin::kBuiltinModel))
    return {resolve_builtin_data(), true};
  return {data, false};
}

HeldOutData resolve_held_out_data(const RunData& data) {
  if (data.builtin) return {builtin_heldout_data_dir(), false};
  if (data.dir.empty()) return {data::default_heldout_dir(), false};
  return {data.dir, true};
}

}  // namespace hsring::eval
