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
  std::vector<uint8_t> counted;  // per token: 1 when the loss mask counts it (all 1: no mask)
};

// A random loss mask for a document of `n` tokens, shaped like chat data: runs of masked
// (prompt) and counted (response) tokens, sometimes all counted, sometimes none.
inline std::vector<uint8_t> random_mask(std::mt19937_64& rng, size_t n) {
  std::vector<uint8_t> mask(n, 1);
  const uint64_t kind = rng() % 6;
  if (kind == 0) return mask;  // a document the mask leaves whole
  if (kind == 1) return std::vector<uint8_t>(n, 0);
  uint8_t on = uint8_t(rng() % 2);
  for (size_t i = 0; i < n;) {
    const size_t run = 1 + rng() % 12;
    for (size_t k = 0; k < run && i < n; ++k) mask[i++] = on;
    on ^= 1;
  }
  return mask;
}

// A shard of `docs` documents with lengths in [0, max_doc] (some empty), random tokens,
// and with `masked` a random loss mask per document.
inline ShardContent write_random_shard(const std::string& path, std::mt19937_64& rng, uint32_t docs,
                                       uint32_t max_doc, uint32_t token_bytes, uint32_t vocab,
                                       bool masked = false) {
  ShardContent content{path, token_bytes};
  ShardWriter writer(path, token_bytes, vocab);
  std::uniform_int_distribution<uint32_t> length(0, max_doc);
  std::uniform_int_distribution<uint32_t> token(0, vocab ? vocab - 1 : 255);
  for (uint32_t d = 0; d < docs; ++d) {
    std::vector<uint32_t> doc(rng() % 7 == 0 ? 0 : length(rng));
    for (uint32_t& t : doc) t = token(rng);
    const std::vector<uint8_t> mask =
        masked ? random_mask(rng, doc.size()) : std::vector<uint8_t>(doc.size(), 1);
    if (masked)
      writer.add_document(doc, mask);
    else
      writer.add_document(doc);
    content.tokens.insert(content.tokens.end(), doc.begin(), doc.end());
    content.counted.insert(content.counted.end(), mask.begin(), mask.end());
    content.offsets.push_back(content.tokens.size());
  }
  writer.finish();
  return content;
}

// Shards "s0.hstok", "s1.hstok", ... in `dir` with widths cycling through 1, 2, 4.
inline std::vector<ShardContent> write_random_corpus(const std::string& dir, std::mt19937_64& rng,
                                                     uint32_t shards, uint32_t docs,
                                                     uint32_t max_doc, bool masked = false) {
  std::vector<ShardContent> out;
  const uint32_t widths[] = {1, 2, 4};
  const uint32_t vocabs[] = {256, 50000, 150000};
  for (uint32_t s = 0; s < shards; ++s) {
    char name[32];
    std::snprintf(name, sizeof name, "/s%03u.hstok", s);  // file-name order is shard order
    out.push_back(
        write_random_shard(dir + name, rng, docs, max_doc, widths[s % 3], vocabs[s % 3], masked));
  }
  return out;
}

}  // namespace hsring::data::testing
