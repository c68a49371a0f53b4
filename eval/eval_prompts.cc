#include "eval/eval_prompts.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

#include "common/error.h"
#include "data/default_corpus.h"
#include "data/held_out.h"
#include "data/token_batch.h"
#include "eval/prompt_preparation.h"

namespace hsring::eval {
namespace {

// Tokens [begin, begin + length) of shard `shard`, with their labels (the loss mask).
data::TokenBatch read_tokens(const data::Corpus& corpus, uint32_t shard, uint64_t begin,
                             uint32_t length) {
  const data::Piece piece{shard, length, begin};
  data::BatchRef ref;
  ref.pieces = std::span<const data::Piece>(&piece, 1);
  ref.token_count = length;
  return data::read_batch(corpus, ref);
}

std::string source_of(const data::Corpus& corpus, uint32_t shard, uint64_t document,
                      uint64_t offset) {
  std::string s = std::filesystem::path(corpus.shards()[shard].path).filename().string() + "#" +
                  std::to_string(document);
  if (offset) s += "@" + std::to_string(offset);
  return s;
}

[[noreturn]] void no_prompt(const data::Corpus& corpus, const std::string& why) {
  throw Error(Errc::kData, "corpus " + corpus.dir() + " has no " + why);
}

}  // namespace

std::vector<EvalPrompt> held_out_windows(const data::Corpus& corpus, uint32_t max_prompts,
                                         uint32_t prompt_tokens) {
  struct Document {
    uint32_t shard;
    uint64_t index, begin, windows;
  };
  std::vector<Document> documents;
  uint64_t most_windows = 0;
  const auto& shards = corpus.shards();
  for (uint32_t s = 0; s < shards.size(); ++s)
    for (uint64_t d = 0; d + 1 < shards[s].doc_offsets.size(); ++d) {
      const uint64_t begin = shards[s].doc_offsets[d], end = shards[s].doc_offsets[d + 1];
      const uint64_t windows = prompt_tokens ? (end - begin) / prompt_tokens : 0;
      if (windows) documents.push_back({s, d, begin, windows});
      most_windows = std::max(most_windows, windows);
    }
  std::vector<EvalPrompt> prompts;
  for (uint64_t w = 0; w < most_windows; ++w)
    for (const Document& d : documents) {
      if (w >= d.windows) continue;
      if (prompts.size() == max_prompts) return prompts;
      const uint64_t offset = w * prompt_tokens;
      prompts.push_back({read_tokens(corpus, d.shard, d.begin + offset, prompt_tokens).tokens,
                         source_of(corpus, d.shard, d.index, offset)});
    }
  if (prompts.empty())
    no_prompt(corpus, fmt::format("document of at least {} tokens for a prompt", prompt_tokens));
  return prompts;
}

std::vector<EvalPrompt> held_out_prompts(const data::Corpus& corpus, uint32_t count,
                                         uint32_t prompt_tokens, uint64_t first_document) {
  std::vector<EvalPrompt> prompts;
  const auto& shards = corpus.shards();
  uint64_t document = corpus.doc_count();  // global index of the document after the next one
  for (size_t si = shards.size(); si-- > 0 && prompts.size() < count;) {
    const data::ShardInfo& shard = shards[si];
    for (size_t d = shard.doc_offsets.size() - 1; d-- > 0 && prompts.size() < count;) {
      if (document-- <= first_document) break;
      const uint64_t begin = shard.doc_offsets[d], end = shard.doc_offsets[d + 1];
      if (end - begin < prompt_tokens || prompt_tokens == 0) continue;
      prompts.push_back({read_tokens(corpus, uint32_t(si), begin, prompt_tokens).tokens,
                         source_of(corpus, uint32_t(si), d, 0)});
    }
    if (document <= first_document) break;
  }
  if (prompts.empty())
    no_prompt(corpus,
              fmt::format("held-out document of at least {} tokens for a prompt", prompt_tokens));
  return prompts;
}

std::vector<EvalPrompt> document_prompts(const data::Corpus& corpus, uint32_t max_prompts) {
  std::vector<EvalPrompt> prompts;
  const auto& shards = corpus.shards();
  for (uint32_t s = 0; s < shards.size() && prompts.size() < max_prompts; ++s)
    for (uint64_t d = 0; d + 1 < shards[s].doc_offsets.size() && prompts.size() < max_prompts;
         ++d) {
      const uint64_t begin = shards[s].doc_offsets[d], end = shards[s].doc_offsets[d + 1];
      if (end == begin) continue;
      data::TokenBatch doc = read_tokens(corpus, s, begin, uint32_t(end - begin));
      size_t length = doc.tokens.size();
      if (shards[s].header.has_mask())
        for (size_t t = 0; t < doc.labels.size(); ++t)
          if (doc.labels[t] >= 0) {
            length = t + 1;
            break;
          }
      doc.tokens.resize(length);
      prompts.push_back({std::move(doc.tokens), source_of(corpus, s, d, 0)});
    }
  if (prompts.empty()) no_prompt(corpus, "non-empty document for a prompt");
  return prompts;
}

namespace {

data::Corpus open_checked(const std::string& dir, const std::string& model, uint32_t vocab_size) {
  data::Corpus corpus = data::open_token_data(dir);
  if (const std::string problem = data::vocabulary_problem(corpus, vocab_size, model);
      !problem.empty())
    throw Error(Errc::kData, problem);
  return corpus;
}

// A private folder for prepared prompts, removed with its object.
struct TemporaryFolder {
  std::filesystem::path path;
  TemporaryFolder() {
    std::string name = (std::filesystem::temp_directory_path() / "hsring-prompts-XXXXXX").string();
    if (::mkdtemp(name.data()) == nullptr)
      throw Error(Errc::kSystem, "could not create a temporary folder for the prompts");
    path = name;
  }
  ~TemporaryFolder() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace

ChosenPrompts choose_prompts(const PromptChoice& choice, const std::string& model,
                             uint32_t vocab_size) {
  ChosenPrompts chosen;
  if (!choice.prompts.empty()) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(choice.prompts, ec)) {
      const TemporaryFolder folder;
      const std::string dir = (folder.path / "prompts").string();
      prepare_chat_prompts(model, choice.prompts, dir);
      chosen.prompts = document_prompts(open_checked(dir, model, vocab_size), choice.max_prompts);
      chosen.description = "the chats of " + choice.prompts;
      return chosen;
    }
    if (!std::filesystem::exists(choice.prompts, ec) &&
        choice.prompts.find_first_not_of("0123456789") == std::string::npos)
      throw Error(Errc::kUsage,
                  "--prompts names a prompt folder or JSONL chats, not a count: " + choice.prompts +
                      " does not exist (use --max-prompts " + choice.prompts + ")");
    chosen.prompts =
        document_prompts(open_checked(choice.prompts, model, vocab_size), choice.max_prompts);
    chosen.description = "the prompt folder " + choice.prompts;
    return chosen;
  }
  if (!choice.data.empty()) {
    const data::Corpus corpus = open_checked(choice.data, model, vocab_size);
    const uint64_t first = data::first_held_out_document(corpus);
    if (first == corpus.doc_count())
      throw Error(Errc::kData,
                  fmt::format("corpus {} has {} documents, too few to hold any out (one in {} "
                              "is, from 16 on): name prompts with --prompts (hsring eval) or "
                              "--eval-prompts (hsring run)",
                              corpus.dir(), corpus.doc_count(), data::kHeldOutFraction));
    chosen.prompts = held_out_prompts(corpus, choice.max_prompts, choice.prompt_tokens, first);
    chosen.description = fmt::format("the first {} tokens of the held-out documents of {}",
                                     choice.prompt_tokens, corpus.dir());
    return chosen;
  }
  // The built-in corpus's held-out part, which no built-in training run reads.
  const data::Corpus corpus = data::Corpus::open(data::default_heldout_dir());
  chosen.prompts = held_out_windows(corpus, choice.max_prompts, choice.prompt_tokens);
  chosen.description = fmt::format("windows of {} tokens of the built-in held-out documents ({})",
                                   choice.prompt_tokens, corpus.dir());
  return chosen;
}

}  // namespace hsring::eval
