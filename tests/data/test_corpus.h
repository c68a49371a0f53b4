// Test helpers: a temporary folder that removes itself, and random corpora written as
// shards whose every token the test knows.
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "data/shard_writer.h"

namespace hsring::data::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "hsring-data-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// What was written into one shard.
struct ShardContent {
  std::string path;
  uint32_t token_bytes = 2;
  std::vector<uint32_t> tokens;
  std::vector<uint64_t> offsets{0};
};

// A shard of `docs` documents with lengths in [0, max_doc] (some empty), random tokens.
inline ShardContent write_random_shard(const std::string& path, std::mt19937_64& rng, uint32_t docs,
                                       uint32_t max_doc, uint32_t token_bytes, uint32_t vocab) {
  ShardContent content{path, token_bytes};
  ShardWriter writer(path, token_bytes, vocab);
  std::uniform_int_distribution<uint32_t> length(0, max_doc);
  std::uniform_int_distribution<uint32_t> token(0, vocab ? vocab - 1 : 255);
  for (uint32_t d = 0; d < docs; ++d) {
    std::vector<uint32_t> doc(rng() % 7 == 0 ? 0 : length(rng));
    for (uint32_t& t : doc) t = token(rng);
    writer.add_document(doc);
    content.tokens.insert(content.tokens.end(), doc.begin(), doc.end());
    content.offsets.push_back(content.tokens.size());
  }
  writer.finish();
  return content;
}

// Shards "s0.hstok", "s1.hstok", ... in `dir` with widths cycling through 1, 2, 4.
inline std::vector<ShardContent> write_random_corpus(const std::string& dir, std::mt19937_64& rng,
                                                     uint32_t shards, uint32_t docs,
                                                     uint32_t max_doc) {
  std::vector<ShardContent> out;
  const uint32_t widths[] = {1, 2, 4};
  const uint32_t vocabs[] = {256, 50000, 150000};
  for (uint32_t s = 0; s < shards; ++s) {
    char name[32];
    std::snprintf(name, sizeof name, "/s%03u.hstok", s);  // file-name order is shard order
    out.push_back(write_random_shard(dir + name, rng, docs, max_doc, widths[s % 3], vocabs[s % 3]));
  }
  return out;
}

}  // namespace hsring::data::testing
