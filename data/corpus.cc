#include "data/corpus.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "common/error.h"

namespace hsring::data {

namespace fs = std::filesystem;

std::vector<std::string> Corpus::list_shards(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> paths;
  fs::directory_iterator it(dir, ec);
  if (ec) throw Error(Errc::kData, dir, 0, "cannot list the folder: " + ec.message());
  for (const fs::directory_entry& entry : it)
    if (entry.path().extension() == kShardExtension) paths.push_back(entry.path().string());
  std::sort(paths.begin(), paths.end());
  return paths;
}

Corpus Corpus::open(const std::string& dir, const CorpusOptions& options) {
  std::vector<ShardInfo> shards;
  for (const std::string& path : list_shards(dir)) {
    shards.push_back(read_shard_info(path));
    if (options.verify_tokens) verify_shard_tokens(shards.back(), options.stream);
  }
  return from_shards(dir, std::move(shards));
}

Corpus Corpus::from_shards(std::string dir, std::vector<ShardInfo> shards) {
  Corpus corpus;
  corpus.dir_ = std::move(dir);
  corpus.shards_ = std::move(shards);
  if (corpus.shards_.size() > UINT32_MAX)
    throw Error(Errc::kData, corpus.dir_ + ": too many shards");
  for (const ShardInfo& s : corpus.shards_) {
    corpus.token_count_ += s.header.token_count;
    corpus.doc_count_ += s.header.doc_count;
  }
  if (corpus.shards_.empty())
    throw Error(Errc::kData,
                corpus.dir_ + ": no token shard (*" + std::string(kShardExtension) + ") here");
  if (corpus.token_count_ == 0)
    throw Error(Errc::kData, corpus.dir_ + ": the shards hold no token");
  return corpus;
}

std::string vocabulary_problem(const Corpus& corpus, uint32_t vocab_size,
                               const std::string& model_name) {
  for (const ShardInfo& shard : corpus.shards()) {
    const uint32_t vocab = shard.header.vocab_size;
    if (vocab == 0 || vocab > vocab_size)
      return fmt::format(
          "shard {} has a vocabulary of {} tokens but the model '{}' has {}: pack the data "
          "with the model's tokenizer (docs/data-format.md)",
          shard.path, vocab == 0 ? std::string("unknown size") : std::to_string(vocab), model_name,
          vocab_size);
  }
  return "";
}

}  // namespace hsring::data
