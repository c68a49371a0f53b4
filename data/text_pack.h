// Text to byte-level token shards (vocabulary 256: each byte is a token), the format any
// tokenizer's output can use too. Used by `hsring data pack` and the default corpus.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/shard_set_writer.h"

namespace hsring::data {

struct TextPackOptions {
  uint64_t shard_tokens = kDefaultShardTokens;  // a shard closes before it would pass this
  bool split_blank_lines = false;               // a document per paragraph, not per file
};

using PackSummary = ShardSetSummary;

// The documents of one text: the whole text, or (split_blank_lines) each run of
// non-blank lines, newlines included. Empty documents are left out.
std::vector<std::string_view> split_documents(std::string_view text, bool split_blank_lines);

// Writes the documents of texts into a new corpus folder (ShardSetWriter), byte-level.
class TextPacker {
 public:
  // Creates `dir` if needed. Throws Error (bad options) if it already holds shards, so
  // two packs never mix into one corpus.
  TextPacker(std::string dir, const TextPackOptions& options);
  void add_text(std::string_view text);  // split as the options say, then added
  PackSummary finish();                  // REQUIRES: called once, last

 private:
  TextPackOptions options_;
  ShardSetWriter writer_;
};

// Reads a corpus file whole (hsring data pack). Throws Error (class data).
std::string read_corpus_file(const std::string& path);

}  // namespace hsring::data
