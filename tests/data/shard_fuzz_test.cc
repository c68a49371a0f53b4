// Fuzzed and truncated shards: every input is either a valid parse or an Error that
// names the file and byte, never a crash or an out-of-bounds read (these run under ASan).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "common/crc32.h"
#include "common/error.h"
#include "data/corpus.h"
#include "data/shard_file.h"
#include "data/token_batch.h"
#include "test_corpus.h"

namespace hsring::data {
namespace {

using testing::TempDir;

std::vector<char> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

void spit(const std::string& path, const char* bytes, size_t size) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes, std::streamsize(size));
}

// Opens and fully verifies `path`; true if valid, false on an Error naming the file.
bool check_file(const std::string& path) {
  try {
    verify_shard_tokens(read_shard_info(path), StreamOptions{256, 2});
    return true;
  } catch (const Error& e) {
    EXPECT_EQ(e.path(), path);
    EXPECT_NE(std::string(e.what()).find(path + ": byte " + std::to_string(e.offset())),
              std::string::npos)
        << e.what();
    return false;
  }
}

void reseal_header(std::vector<char>& b) {
  const uint32_t crc = crc32(b.data(), kFieldHeaderCrc);
  std::memcpy(b.data() + kFieldHeaderCrc, &crc, 4);
}

TEST(ShardFuzzTest, RandomBytesAreRejectedCleanly) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 3000; ++i) {
    std::vector<std::byte> bytes(rng() % 200);
    for (auto& b : bytes) b = std::byte(rng());
    if (i % 2 && bytes.size() >= 8) std::memcpy(bytes.data(), kShardMagic.data(), 8);
    try {
      const ShardHeader h = decode_header(bytes.data(), bytes.size(), rng() % 100000, "fuzz");
      // A header that parses (rare) must describe a consistent, bounded file.
      EXPECT_LE(h.token_count, kMaxShardTokens);
    } catch (const Error& e) {
      EXPECT_EQ(e.path(), "fuzz");
    }
  }
}

TEST(ShardFuzzTest, MutatedValidHeadersAreCaught) {
  TempDir dir;
  std::mt19937_64 rng(12);
  const auto content = testing::write_random_shard(dir.file("m.hstok"), rng, 12, 40, 2, 1000);
  const std::vector<char> valid = slurp(content.path);
  const std::string path = dir.file("mutant.hstok");
  int valid_after = 0;
  for (int i = 0; i < 1000; ++i) {
    std::vector<char> b = valid;
    const int flips = 1 + int(rng() % 4);
    for (int f = 0; f < flips; ++f) b[rng() % kShardHeaderSize] = char(rng());
    // Half with the header CRC fixed up, so the field checks behind it are reached too.
    if (i % 2) reseal_header(b);
    spit(path, b.data(), b.size());
    valid_after += check_file(path);
  }
  // Only mutations that rewrote a byte to its own value (or a CRC-fixed no-op) survive.
  EXPECT_LT(valid_after, 100);
}

// Every change of one byte past the header (tokens, offsets, the mask) is caught.
void expect_every_body_mutation_caught(const testing::ShardContent& content,
                                       const std::string& path, std::mt19937_64& rng) {
  const std::vector<char> valid = slurp(content.path);
  for (int i = 0; i < 1000; ++i) {
    std::vector<char> b = valid;
    const size_t at = kShardHeaderSize + rng() % (b.size() - kShardHeaderSize);
    const char was = b[at];
    b[at] = char(rng());
    spit(path, b.data(), b.size());
    EXPECT_EQ(check_file(path), b[at] == was) << "byte " << at;
  }
}

TEST(ShardFuzzTest, MutatedTablesAndTokensAreCaught) {
  TempDir dir;
  std::mt19937_64 rng(13);
  const auto content = testing::write_random_shard(dir.file("t.hstok"), rng, 12, 40, 4, 100000);
  expect_every_body_mutation_caught(content, dir.file("mutant.hstok"), rng);
}

TEST(ShardFuzzTest, MutatedMasksTablesAndTokensAreCaught) {
  TempDir dir;
  std::mt19937_64 rng(16);
  // Width 1 and long documents: the mask is a large share of the file.
  const auto content = testing::write_random_shard(dir.file("t.hstok"), rng, 12, 200, 1, 256, true);
  ASSERT_TRUE(read_shard_info(content.path).header.has_mask());
  expect_every_body_mutation_caught(content, dir.file("mutant.hstok"), rng);
}

void expect_every_cut_named(const testing::ShardContent& content, const std::string& path) {
  const std::vector<char> valid = slurp(content.path);
  for (size_t cut = 0; cut < valid.size(); ++cut) {
    spit(path, valid.data(), cut);
    try {
      read_shard_info(path);
      ADD_FAILURE() << "a shard cut at byte " << cut << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kData) << cut << ": " << e.what();
      EXPECT_EQ(e.offset(), cut) << e.what();
      EXPECT_NE(std::string(e.what()).find(path + ": byte " + std::to_string(cut)),
                std::string::npos)
          << e.what();
    }
  }
  spit(path, valid.data(), valid.size());
  EXPECT_TRUE(check_file(path));
}

TEST(ShardFuzzTest, TruncationAtEveryOffsetNamesFileAndOffset) {
  TempDir dir;
  std::mt19937_64 rng(14);
  const auto content = testing::write_random_shard(dir.file("full.hstok"), rng, 9, 30, 2, 5000);
  expect_every_cut_named(content, dir.file("cut.hstok"));
}

TEST(ShardFuzzTest, TruncatedMaskedShardAtEveryOffsetNamesFileAndOffset) {
  TempDir dir;
  std::mt19937_64 rng(17);
  const auto content =
      testing::write_random_shard(dir.file("full.hstok"), rng, 9, 60, 1, 256, true);
  ASSERT_TRUE(read_shard_info(content.path).header.has_mask());
  expect_every_cut_named(content, dir.file("cut.hstok"));
}

// Random masks of random lengths: what the writer stores reads back bit for bit, in the
// batches' labels too (a row counts exactly when its next token does).
TEST(ShardFuzzTest, RandomMasksRoundTripIntoLabels) {
  std::mt19937_64 rng(18);
  for (int round = 0; round < 40; ++round) {
    TempDir dir;
    const auto content = testing::write_random_shard(dir.file("r.hstok"), rng, 1 + rng() % 20,
                                                     1 + rng() % 70, 2, 1000, true);
    if (content.tokens.empty()) continue;
    const Corpus corpus = Corpus::open(dir.path());
    const BatchIndex index(corpus, PackOptions{32, uint64_t(round), 8});
    for (uint64_t id = 0; id < index.batches_per_epoch(); ++id) {
      const BatchRef ref = index.batch(id);
      const TokenBatch batch = read_batch(corpus, ref);
      for (size_t d = 0; d < ref.pieces.size(); ++d) {
        const Piece& p = ref.pieces[d];
        for (uint32_t i = 0; i < p.length; ++i) {
          const int32_t t = batch.doc_offsets[d] + int32_t(i);
          const bool counts = i + 1 < p.length && content.counted[p.begin + i + 1] != 0;
          ASSERT_EQ(batch.labels[size_t(t)], counts ? batch.tokens[size_t(t) + 1] : kIgnoreLabel)
              << "round " << round << " batch " << id << " row " << t;
        }
      }
    }
  }
}

TEST(ShardFuzzTest, BadShardInACorpusFailsTheOpen) {
  TempDir dir;
  std::mt19937_64 rng(15);
  testing::write_random_corpus(dir.path(), rng, 3, 10, 50);
  spit(dir.file("s001.hstok"), "HSRTOK", 6);  // truncated inside the magic
  try {
    Corpus::open(dir.path());
    FAIL() << "a corpus with a truncated shard opened";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kData);
    EXPECT_EQ(e.path(), dir.file("s001.hstok"));
    EXPECT_EQ(e.offset(), 6u);
  }
}

}  // namespace
}  // namespace hsring::data
