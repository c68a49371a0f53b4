#include "data/default_corpus.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "common/cached_folder.h"
#include "common/crc32.h"
#include "common/error.h"
#include "data/corpus.h"
#include "data/text_pack.h"

namespace hsring::data {

namespace fs = std::filesystem;

namespace {

// Small shards, so even the default corpus exercises reads across shards.
constexpr uint64_t kDefaultCorpusShardTokens = 64 * 1024;

// Names the packed folder after its content and packing rules: a binary with another
// corpus or another format never picks up a stale folder.
std::string corpus_tag() {
  constexpr std::string_view kRules = "hsring-default-corpus:v2:paragraphs:65536:held-out-16th";
  uint32_t crc = crc32(kRules.data(), kRules.size());
  for (const EmbeddedText& text : embedded_corpus_texts()) {
    crc = crc32_update(crc, text.name, std::string_view(text.name).size());
    crc = crc32_update(crc, text.bytes, text.size);
  }
  char tag[16];
  std::snprintf(tag, sizeof tag, "%08x", crc);
  return tag;
}

bool opens_cleanly(const std::string& dir) {
  try {
    Corpus::open(dir);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Packs one part of the corpus into `staging`.
void pack_into(const fs::path& staging, BuiltinSplit split) {
  TextPackOptions options;
  options.shard_tokens = kDefaultCorpusShardTokens;
  options.split_blank_lines = true;
  TextPacker packer(staging.string(), options);
  for (std::string_view document : builtin_documents(split)) packer.add_text(document);
  packer.finish();
}

}  // namespace

std::string default_cache_root() {
  if (const char* dir = std::getenv("HSRING_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return (fs::path(xdg) / "hsring").string();
  if (const char* home = std::getenv("HOME"); home && *home)
    return (fs::path(home) / ".cache" / "hsring").string();
  return "/tmp/hsring-" + std::to_string(::getuid());
}

namespace {

std::string packed_dir(const std::string& cache_root, BuiltinSplit split) {
  const fs::path root = cache_root.empty() ? default_cache_root() : cache_root;
  const char* part = split == BuiltinSplit::kTraining ? "default-corpus-" : "default-heldout-";
  return cached_folder(
             root / (part + corpus_tag()),
             [](const fs::path& dir) {
               return fs::is_directory(dir) && opens_cleanly(dir.string());
             },
             [split](const fs::path& staging) { pack_into(staging, split); }, Errc::kData)
      .string();
}

}  // namespace

bool is_held_out_document(size_t index) { return index % 16 == 15; }

std::vector<std::string_view> builtin_documents(BuiltinSplit split) {
  std::vector<std::string_view> documents;
  size_t index = 0;
  for (const EmbeddedText& text : embedded_corpus_texts()) {
    const std::string_view all(reinterpret_cast<const char*>(text.bytes), text.size);
    for (std::string_view document : split_documents(all, /*split_blank_lines=*/true)) {
      if (is_held_out_document(index++) == (split == BuiltinSplit::kHeldOut))
        documents.push_back(document);
    }
  }
  return documents;
}

std::string default_corpus_dir(const std::string& cache_root) {
  return packed_dir(cache_root, BuiltinSplit::kTraining);
}

std::string default_heldout_dir(const std::string& cache_root) {
  return packed_dir(cache_root, BuiltinSplit::kHeldOut);
}

Corpus open_token_data(const std::string& dir, bool verify_tokens) {
  CorpusOptions options;
  // The default corpus's folder was opened with every check to be chosen.
  options.verify_tokens = verify_tokens && !dir.empty();
  return Corpus::open(dir.empty() ? default_corpus_dir() : dir, options);
}

}  // namespace hsring::data
