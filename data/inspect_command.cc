// `hsring data inspect`: checks every shard completely and prints one line per shard,
// with how many of its tokens the loss mask counts ("all" without a mask); with --doc N,
// one document decoded, its trained tokens marked (through the Python package).
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "common/error.h"
#include "data/corpus.h"
#include "data/data_commands.h"
#include "data/python_handoff.h"
#include "data/shard_file.h"

namespace hsring::data {

namespace {

const char* dtype_name(uint32_t token_bytes) {
  return token_bytes == 1 ? "uint8" : token_bytes == 2 ? "uint16" : "uint32";
}

}  // namespace

int run_data_inspect(const DataInspectArgs& args) {
  if (args.doc) {  // decoding needs the model's tokenizer: Python's
    std::vector<std::string> argv = {args.path, "--doc", std::to_string(*args.doc)};
    if (!args.model.empty()) argv.insert(argv.end(), {"--model", args.model});
    if (args.tokens) argv.push_back("--tokens");
    return exec_python_module("hsring data inspect", "hsring.prepare.show", argv);
  }
  if (!args.model.empty() || args.tokens) {
    std::cerr << "hsring data inspect: error: --model and --tokens go with --doc N\n";
    return exit_code_of(ErrorClass::kUsage);
  }
  const std::string& path = args.path;
  std::vector<std::string> shards;
  try {
    shards = std::filesystem::is_directory(path) ? Corpus::list_shards(path)
                                                 : std::vector<std::string>{path};
  } catch (const Error& e) {
    std::cerr << "hsring data inspect: error: " << e.what() << "\n";
    return 1;
  }
  if (shards.empty()) {
    std::cerr << "hsring data inspect: error: " << path << ": no token shard (*" << kShardExtension
              << ") here\n";
    return 1;
  }
  std::printf("%-24s %-7s %8s %14s %10s %14s %s\n", "shard", "dtype", "vocab", "tokens",
              "documents", "counted", "checksums");
  uint64_t tokens = 0, documents = 0, counted = 0, bad = 0, masked = 0;
  for (const std::string& shard_path : shards) {
    const std::string name = std::filesystem::path(shard_path).filename().string();
    try {
      const ShardInfo info = read_shard_info(shard_path);
      const ShardCheck check = verify_shard_tokens(info);
      const ShardHeader& h = info.header;
      const std::string count_text =
          h.has_mask() ? std::to_string(check.counted_tokens) : std::string("all");
      std::printf("%-24s %-7s %8u %14llu %10llu %14s ok\n", name.c_str(), dtype_name(h.token_bytes),
                  h.vocab_size, static_cast<unsigned long long>(h.token_count),
                  static_cast<unsigned long long>(h.doc_count), count_text.c_str());
      tokens += h.token_count;
      documents += h.doc_count;
      counted += check.counted_tokens;
      masked += h.has_mask() ? 1 : 0;
    } catch (const Error& e) {
      std::printf("%-24s BAD (below)\n", name.c_str());
      std::fflush(stdout);
      std::cerr << "hsring data inspect: error: " << e.what() << "\n";
      ++bad;
    }
  }
  std::printf("total: %zu shards, %llu tokens, %llu documents; ", shards.size(),
              static_cast<unsigned long long>(tokens), static_cast<unsigned long long>(documents));
  // The share the drafter trains on: a loss mask leaves the rest as context only.
  if (masked > 0)
    std::printf("loss mask in %llu shards, %llu tokens counted (%.1f%%); ",
                static_cast<unsigned long long>(masked), static_cast<unsigned long long>(counted),
                tokens ? 100.0 * double(counted) / double(tokens) : 0.0);
  if (bad == 0) {
    std::printf("every shard ok\n");
    return 0;
  }
  std::printf("%llu bad\n", static_cast<unsigned long long>(bad));
  return 1;
}

}  // namespace hsring::data
