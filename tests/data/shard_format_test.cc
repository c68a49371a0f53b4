// Shard write/read round trips, checksums, and each way a shard can be wrong.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "common/crc32.h"
#include "data/data_error.h"
#include "data/file_io.h"
#include "data/shard_file.h"
#include "test_corpus.h"

namespace hsring::data {
namespace {

using testing::TempDir;

std::vector<char> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

void spit(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
}

DataErrc error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.code();
  }
  ADD_FAILURE() << "no DataError thrown";
  return DataErrc::kIo;
}

TEST(Crc32Test, MatchesZlibCheckValue) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);  // the CRC-32/ISO-HDLC check value
  EXPECT_EQ(crc32("", 0), 0u);
  // Incremental equals one shot, at every split point.
  const std::string text = "hidden states through a ring of slots, 0123456789abcdef";
  for (size_t cut = 0; cut <= text.size(); ++cut)
    EXPECT_EQ(crc32_update(crc32(text.data(), cut), text.data() + cut, text.size() - cut),
              crc32(text.data(), text.size()));
  // Continuing over nothing keeps the checksum, even from a null pointer (zlib alone would
  // restart at 0: an empty vector's data()).
  const uint32_t crc = crc32(text.data(), text.size());
  EXPECT_EQ(crc32_update(crc, nullptr, 0), crc);
}

TEST(ShardFormatTest, RoundTripEveryWidth) {
  TempDir dir;
  std::mt19937_64 rng(1);
  for (uint32_t width : {1u, 2u, 4u}) {
    const uint32_t vocab = width == 1 ? 256 : width == 2 ? 65536 : 200000;
    const auto content = testing::write_random_shard(
        dir.file("w" + std::to_string(width) + ".hstok"), rng, 40, 300, width, vocab);
    const ShardInfo info = read_shard_info(content.path);
    EXPECT_EQ(info.header.token_bytes, width);
    EXPECT_EQ(info.header.vocab_size, vocab);
    EXPECT_EQ(info.header.token_count, content.tokens.size());
    EXPECT_EQ(info.header.doc_count, content.offsets.size() - 1);
    EXPECT_EQ(info.doc_offsets, content.offsets);
    EXPECT_NO_THROW(verify_shard_tokens(info, StreamOptions{4096, 3}));
    // The tokens on disk are the little-endian tokens written.
    const File file = File::open_read(content.path);
    std::vector<std::byte> raw(info.header.tokens_size());
    file.read_exact(raw.data(), raw.size(), info.header.tokens_offset());
    for (size_t i = 0; i < content.tokens.size(); ++i) {
      uint32_t token = 0;
      std::memcpy(&token, raw.data() + i * width, width);
      ASSERT_EQ(token, content.tokens[i]) << "token " << i;
    }
  }
}

TEST(ShardFormatTest, EmptyShardIsValid) {
  TempDir dir;
  ShardWriter writer(dir.file("empty.hstok"), 2, 0);
  writer.finish();
  const ShardInfo info = read_shard_info(dir.file("empty.hstok"));
  EXPECT_EQ(info.header.token_count, 0u);
  EXPECT_EQ(info.doc_offsets, std::vector<uint64_t>{0});
  EXPECT_NO_THROW(verify_shard_tokens(info));
}

TEST(ShardFormatTest, WriterRefusesTokensOutsideTheVocabulary) {
  TempDir dir;
  ShardWriter writer(dir.file("v.hstok"), 2, 1000);
  const std::vector<uint32_t> ok = {1, 999};
  const std::vector<uint32_t> bad = {1000};
  writer.add_document(ok);
  EXPECT_EQ(error_of([&] { writer.add_document(bad); }), DataErrc::kBadToken);
  EXPECT_EQ(error_of([&] { ShardWriter(dir.file("x.hstok"), 1, 257); }), DataErrc::kBadOptions);
  EXPECT_EQ(error_of([&] { ShardWriter(dir.file("y.hstok"), 3, 0); }), DataErrc::kBadOptions);
}

TEST(ShardFormatTest, UnfinishedWriterLeavesNothing) {
  TempDir dir;
  {
    ShardWriter writer(dir.file("gone.hstok"), 1, 256);
    writer.add_text_document("abc");
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("gone.hstok")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("gone.hstok.tmp")));
}

class CorruptShardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(7);
    content_ = testing::write_random_shard(dir_.file("c.hstok"), rng, 20, 100, 2, 30000);
    bytes_ = slurp(content_.path);
  }
  DataError error_after(const std::function<void(std::vector<char>&)>& edit) {
    std::vector<char> bytes = bytes_;
    edit(bytes);
    spit(content_.path, bytes);
    try {
      verify_shard_tokens(read_shard_info(content_.path));
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(content_.path), std::string::npos) << e.what();
      return e;
    }
    ADD_FAILURE() << "the edit went unnoticed";
    return DataError(DataErrc::kIo, "none");
  }
  TempDir dir_;
  testing::ShardContent content_;
  std::vector<char> bytes_;
};

TEST_F(CorruptShardTest, ForeignFile) {
  const DataError e = error_after([](auto& b) { b[2] = 'X'; });
  EXPECT_EQ(e.code(), DataErrc::kForeign);
  EXPECT_EQ(e.offset(), 2u);
}

TEST_F(CorruptShardTest, OtherVersion) {
  const DataError e = error_after([](auto& b) { b[kFieldVersion] = 2; });
  EXPECT_EQ(e.code(), DataErrc::kBadVersion);
  EXPECT_EQ(e.offset(), kFieldVersion);
}

TEST_F(CorruptShardTest, HeaderBitFlip) {
  const DataError e = error_after([](auto& b) { b[kFieldTokenCount] ^= 1; });
  EXPECT_EQ(e.code(), DataErrc::kChecksum);
  EXPECT_EQ(e.offset(), kFieldHeaderCrc);
}

TEST_F(CorruptShardTest, TokenBitFlip) {
  const DataError e = error_after([](auto& b) { b[kShardHeaderSize + 5] ^= 0x10; });
  EXPECT_EQ(e.code(), DataErrc::kChecksum);
  EXPECT_EQ(e.offset(), kShardHeaderSize);
}

TEST_F(CorruptShardTest, OffsetTableBitFlip) {
  const uint64_t table = kShardHeaderSize + content_.tokens.size() * 2;
  const DataError e = error_after([&](auto& b) { b[table + 9] ^= 1; });
  EXPECT_EQ(e.code(), DataErrc::kChecksum);
  EXPECT_EQ(e.offset(), table);
}

TEST_F(CorruptShardTest, TrailingBytes) {
  const DataError e = error_after([](auto& b) { b.push_back(0); });
  EXPECT_EQ(e.code(), DataErrc::kTrailingBytes);
  EXPECT_EQ(e.offset(), bytes_.size());
}

TEST_F(CorruptShardTest, TokenOutsideVocabularyWithValidChecksum) {
  // A writer bug, not corruption: the CRC matches, the value does not fit the vocabulary.
  const DataError e = error_after([&](auto& b) {
    const uint16_t big = 40000;
    std::memcpy(b.data() + kShardHeaderSize + 2 * 3, &big, 2);
    const uint32_t crc = crc32(b.data() + kShardHeaderSize, content_.tokens.size() * 2);
    std::memcpy(b.data() + kFieldTokensCrc, &crc, 4);
    const uint32_t header_crc = crc32(b.data(), kFieldHeaderCrc);
    std::memcpy(b.data() + kFieldHeaderCrc, &header_crc, 4);
  });
  EXPECT_EQ(e.code(), DataErrc::kBadToken);
  EXPECT_EQ(e.offset(), kShardHeaderSize + 2 * 3);
}

TEST_F(CorruptShardTest, DecreasingOffsetsWithValidChecksum) {
  const uint64_t table = kShardHeaderSize + content_.tokens.size() * 2;
  const DataError e = error_after([&](auto& b) {
    const uint64_t back = 0;
    std::memcpy(b.data() + table + 8 * 5, &back, 8);
    const uint32_t crc = crc32(b.data() + table, b.size() - table);
    std::memcpy(b.data() + kFieldOffsetsCrc, &crc, 4);
    const uint32_t header_crc = crc32(b.data(), kFieldHeaderCrc);
    std::memcpy(b.data() + kFieldHeaderCrc, &header_crc, 4);
  });
  // Offset 5 going back to 0 is fine only if 1..4 are 0 too; the first decrease is named.
  EXPECT_EQ(e.code(), DataErrc::kBadOffsets);
  EXPECT_GE(e.offset(), table);
  EXPECT_LE(e.offset(), table + 8 * 6);
}

}  // namespace
}  // namespace hsring::data
