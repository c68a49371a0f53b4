// Shard write/read round trips, checksums, and each way a shard can be wrong.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "common/crc32.h"
#include "common/error.h"
#include "data/corpus.h"
#include "data/file_io.h"
#include "data/shard_file.h"
#include "test_corpus.h"
#include "tests/common/planted_files.h"
#include "tests/common/special_files.h"
#include "tests/common/thrown_error.h"

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

using hsring::testing::thrown_code;

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

// A FIFO named like a shard blocked `hsring run`'s preflight in open() (issue 33): it is
// refused with its name, and so is a folder.
TEST(ShardFormatTest, AFifoOrAFolderNamedLikeAShardIsRefusedWithoutBlocking) {
  const hsring::testing::HangGuard guard;
  TempDir dir;
  std::mt19937_64 rng(2);
  testing::write_random_shard(dir.file("a.hstok"), rng, 4, 50, 2, 1000);
  for (const bool fifo : {true, false}) {
    const std::string planted = dir.file("b.hstok");
    std::filesystem::remove_all(planted);
    if (fifo)
      hsring::testing::plant_fifo(planted);
    else
      std::filesystem::create_directory(planted);
    try {
      (void)Corpus::open(dir.path());
      ADD_FAILURE() << planted << " was read";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kData) << e.what();
      EXPECT_NE(std::string(e.what()).find(
                    planted + ": cannot open: " + (fifo ? "a FIFO (named pipe)" : "a folder") +
                    ", not a regular file"),
                std::string::npos)
          << e.what();
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
  EXPECT_EQ(thrown_code([&] { writer.add_document(bad); }), Errc::kData);
  EXPECT_EQ(thrown_code([&] { ShardWriter(dir.file("x.hstok"), 1, 257); }), Errc::kData);
  EXPECT_EQ(thrown_code([&] { ShardWriter(dir.file("y.hstok"), 3, 0); }), Errc::kData);
}

TEST(ShardFormatTest, UnfinishedWriterLeavesNothing) {
  TempDir dir;
  {
    ShardWriter writer(dir.file("gone.hstok"), 1, 256);
    writer.add_text_document("abc");
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

// A corpus folder shared with other users: names planted where the writer's temporary
// used to go (NAME.tmp) are never written through, and the shard lands whole.
TEST(ShardFormatTest, PlantedTemporaryNamesAreNeverWrittenThrough) {
  TempDir dir, elsewhere;
  const std::string victim = elsewhere.file("victim");
  hsring::testing::make_victim(victim);
  hsring::testing::plant_symlink(dir.file("s.hstok.tmp"), victim);
  {
    ShardWriter writer(dir.file("s.hstok"), 1, 256);
    hsring::testing::plant_symlink(dir.file("s.hstok.tmp"),
                                   victim);  // after the writer's own cleanup
    writer.add_text_document("abc");
    writer.finish();
  }
  EXPECT_TRUE(hsring::testing::victim_untouched(victim));
  EXPECT_TRUE(
      std::filesystem::is_regular_file(std::filesystem::symlink_status(dir.file("s.hstok"))));
}

// The mask bits of `content` as stored: bit t % 8 of byte t / 8.
std::vector<uint8_t> stored_mask(const ShardInfo& info) {
  const File file = File::open_read(info.path);
  std::vector<std::byte> raw(info.header.mask_size());
  file.read_exact(raw.data(), raw.size(), info.header.mask_offset());
  std::vector<uint8_t> bits(info.header.token_count);
  for (uint64_t t = 0; t < bits.size(); ++t) bits[t] = mask_bit(raw.data(), t) ? 1 : 0;
  return bits;
}

TEST(ShardMaskTest, RoundTripEveryWidth) {
  TempDir dir;
  std::mt19937_64 rng(3);
  for (uint32_t width : {1u, 2u, 4u}) {
    const auto content = testing::write_random_shard(
        dir.file("m" + std::to_string(width) + ".hstok"), rng, 60, 90, width, 256, true);
    const ShardInfo info = read_shard_info(content.path);
    ASSERT_TRUE(info.header.has_mask());
    EXPECT_EQ(info.header.version, kShardVersion);
    EXPECT_EQ(info.header.mask_size(), (content.tokens.size() + 7) / 8);
    EXPECT_EQ(info.header.file_size(), std::filesystem::file_size(content.path));
    EXPECT_EQ(stored_mask(info), content.counted);
    uint64_t counted = 0;
    for (uint8_t c : content.counted) counted += c;
    EXPECT_EQ(verify_shard_tokens(info, StreamOptions{4096, 3}).counted_tokens, counted);
  }
}

TEST(ShardMaskTest, NoMaskOrAnAllCountedMaskWritesVersionOneByteForByte) {
  TempDir dir;
  const std::vector<std::vector<uint32_t>> docs = {{1, 2, 3}, {}, {4, 5, 6, 7, 8, 9, 10, 11, 12}};
  {
    ShardWriter plain(dir.file("plain.hstok"), 2, 1000);
    ShardWriter ones(dir.file("ones.hstok"), 2, 1000);
    for (const auto& d : docs) {
      plain.add_document(d);
      ones.add_document(d, std::vector<uint8_t>(d.size(), 1));
    }
    plain.finish();
    ones.finish();
  }
  const std::vector<char> plain = slurp(dir.file("plain.hstok"));
  EXPECT_EQ(plain, slurp(dir.file("ones.hstok")));
  const ShardInfo info = read_shard_info(dir.file("plain.hstok"));
  EXPECT_EQ(info.header.version, kShardVersionNoMask);
  EXPECT_FALSE(info.header.has_mask());
  EXPECT_EQ(verify_shard_tokens(info).counted_tokens, 12u);
  // Version 1's layout: header, tokens, offsets, nothing after.
  EXPECT_EQ(plain.size(), kShardHeaderSize + 12 * 2 + 4 * 8);
}

TEST(ShardMaskTest, VersionTwoWithoutTheFlagReadsAsUnmasked) {
  // What a writer of version 2 that has no mask for a shard produces.
  TempDir dir;
  std::mt19937_64 rng(4);
  const auto content = testing::write_random_shard(dir.file("v2.hstok"), rng, 5, 20, 2, 300);
  std::vector<char> b = slurp(content.path);
  b[kFieldVersion] = 2;
  const uint32_t crc = crc32(b.data(), kFieldHeaderCrc);
  std::memcpy(b.data() + kFieldHeaderCrc, &crc, 4);
  spit(content.path, b);
  const ShardInfo info = read_shard_info(content.path);
  EXPECT_EQ(info.header.version, 2u);
  EXPECT_FALSE(info.header.has_mask());
  EXPECT_EQ(verify_shard_tokens(info).counted_tokens, content.tokens.size());
}

// A version 2 shard built byte by byte from docs/data-format.md's table, as a writer in
// another language would: the reader must take it and see the documented mask.
TEST(ShardMaskTest, HandBuiltFromTheDocumentedLayout) {
  TempDir dir;
  const std::vector<uint16_t> tokens = {10, 11, 12, 13, 14, 20, 21, 22, 23, 24};
  const std::vector<uint64_t> offsets = {0, 5, 10};
  // Document 0: prompt 10 11, response 12 13 14; document 1: prompt 20, response 21..24.
  const std::vector<uint8_t> counted = {0, 0, 1, 1, 1, 0, 1, 1, 1, 1};
  std::vector<uint8_t> mask(2, 0);
  for (size_t t = 0; t < counted.size(); ++t) mask[t / 8] |= uint8_t(counted[t] << (t % 8));
  std::vector<char> b(64, 0);
  const auto put32 = [&](size_t at, uint32_t v) { std::memcpy(b.data() + at, &v, 4); };
  const auto put64 = [&](size_t at, uint64_t v) { std::memcpy(b.data() + at, &v, 8); };
  std::memcpy(b.data(), "HSRTOKNS", 8);
  put32(8, 2);
  put32(12, 64);
  put32(16, 2);
  put32(20, 300);
  put64(24, tokens.size());
  put64(32, offsets.size() - 1);
  put32(40, crc32(tokens.data(), tokens.size() * 2));
  put32(44, crc32(offsets.data(), offsets.size() * 8));
  put32(48, 1);
  put32(52, crc32(mask.data(), mask.size()));
  put32(60, crc32(b.data(), 60));
  const auto append = [&](const void* p, size_t n) {
    b.insert(b.end(), static_cast<const char*>(p), static_cast<const char*>(p) + n);
  };
  append(tokens.data(), tokens.size() * 2);
  append(offsets.data(), offsets.size() * 8);
  append(mask.data(), mask.size());
  spit(dir.file("hand.hstok"), b);
  const ShardInfo info = read_shard_info(dir.file("hand.hstok"));
  EXPECT_EQ(verify_shard_tokens(info).counted_tokens, 7u);
  EXPECT_EQ(stored_mask(info), counted);
}

TEST(ShardMaskTest, WriterRefusesAMaskOfAnotherLengthAndKeepsTheShard) {
  TempDir dir;
  ShardWriter writer(dir.file("w.hstok"), 2, 100);
  const std::vector<uint32_t> doc = {1, 2, 3};
  writer.add_document(doc, std::vector<uint8_t>{0, 1, 1});
  EXPECT_EQ(thrown_code([&] {
              writer.add_document(doc, std::vector<uint8_t>{1, 1});
            }),
            Errc::kData);
  const std::vector<uint32_t> bad = {1, 200};
  EXPECT_EQ(thrown_code([&] {
              writer.add_document(bad, std::vector<uint8_t>{1, 0});
            }),
            Errc::kData);
  writer.finish();
  const ShardInfo info = read_shard_info(dir.file("w.hstok"));
  EXPECT_EQ(info.header.token_count, 3u);
  EXPECT_EQ(info.doc_offsets, (std::vector<uint64_t>{0, 3}));
  EXPECT_EQ(stored_mask(info), (std::vector<uint8_t>{0, 1, 1}));
}

class CorruptShardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(7);
    content_ = testing::write_random_shard(dir_.file("c.hstok"), rng, 20, 100, 2, 30000);
    bytes_ = slurp(content_.path);
  }
  Error error_after(const std::function<void(std::vector<char>&)>& edit) {
    std::vector<char> bytes = bytes_;
    edit(bytes);
    spit(content_.path, bytes);
    try {
      verify_shard_tokens(read_shard_info(content_.path));
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(content_.path), std::string::npos) << e.what();
      return e;
    }
    ADD_FAILURE() << "the edit went unnoticed";
    return Error(Errc::kData, "none");
  }
  TempDir dir_;
  testing::ShardContent content_;
  std::vector<char> bytes_;
};

TEST_F(CorruptShardTest, ForeignFile) {
  const Error e = error_after([](auto& b) { b[2] = 'X'; });
  EXPECT_EQ(e.code(), Errc::kData);
  EXPECT_EQ(e.offset(), 2u);
}

TEST_F(CorruptShardTest, OtherVersion) {
  const Error e = error_after([](auto& b) { b[kFieldVersion] = 3; });
  EXPECT_EQ(e.code(), Errc::kData);
  EXPECT_EQ(e.offset(), kFieldVersion);
}

TEST_F(CorruptShardTest, HeaderBitFlip) {
  const Error e = error_after([](auto& b) { b[kFieldTokenCount] ^= 1; });
  EXPECT_EQ(e.code(), Errc::kData);
  EXPECT_EQ(e.offset(), kFieldHeaderCrc);
}

TEST_F(CorruptShardTest, TokenBitFlip) {
  const Error e = error_after([](auto& b) { b[kShardHeaderSize + 5] ^= 0x10; });
  EXPECT_EQ(e.code(), Errc::kData);
  EXPECT_EQ(e.offset(), kShardHeaderSize);
}

TEST_F(CorruptShardTest, OffsetTableBitFlip) {
  const uint64_t table = kShardHeaderSize + content_.tokens.size() * 2;
  const Error e = error_after([&](auto& b) { b[table + 9] ^= 1; });
  EXPECT_EQ(e.code(), Errc::kData);
  EXPECT_EQ(e.offset(), table);
}

TEST_F(CorruptShardTest, TrailingBytes) {
  const Error e = error_after([](auto& b) { b.push_back(0); });
  EXPECT_EQ(e.code(), Errc::kData);
  EXPECT_EQ(e.offset(), bytes_.size());
}

TEST_F(CorruptShardTest, TokenOutsideVocabularyWithValidChecksum) {
  // A writer bug, not corruption: the CRC matches, the value does not fit the vocabulary.
  const Error e = error_after([&](auto& b) {
    const uint16_t big = 40000;
    std::memcpy(b.data() + kShardHeaderSize + 2 * 3, &big, 2);
    const uint32_t crc = crc32(b.data() + kShardHeaderSize, content_.tokens.size() * 2);
    std::memcpy(b.data() + kFieldTokensCrc, &crc, 4);
    const uint32_t header_crc = crc32(b.data(), kFieldHeaderCrc);
    std::memcpy(b.data() + kFieldHeaderCrc, &header_crc, 4);
  });
  EXPECT_EQ(e.code(), Errc::kData);
  EXPECT_EQ(e.offset(), kShardHeaderSize + 2 * 3);
}

TEST_F(CorruptShardTest, DecreasingOffsetsWithValidChecksum) {
  const uint64_t table = kShardHeaderSize + content_.tokens.size() * 2;
  const Error e = error_after([&](auto& b) {
    const uint64_t back = 0;
    std::memcpy(b.data() + table + 8 * 5, &back, 8);
    const uint32_t crc = crc32(b.data() + table, b.size() - table);
    std::memcpy(b.data() + kFieldOffsetsCrc, &crc, 4);
    const uint32_t header_crc = crc32(b.data(), kFieldHeaderCrc);
    std::memcpy(b.data() + kFieldHeaderCrc, &header_crc, 4);
  });
  // Offset 5 going back to 0 is fine only if 1..4 are 0 too; the first decrease is named.
  EXPECT_EQ(e.code(), Errc::kData);
  EXPECT_GE(e.offset(), table);
  EXPECT_LE(e.offset(), table + 8 * 6);
}

class CorruptMaskTest : public CorruptShardTest {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(8);
    // 61 tokens: the mask's last byte has 3 padding bits.
    ShardWriter writer(dir_.file("m.hstok"), 2, 30000);
    std::vector<uint32_t> doc(61);
    std::vector<uint8_t> mask(61);
    for (size_t i = 0; i < doc.size(); ++i) {
      doc[i] = uint32_t(rng() % 30000);
      mask[i] = i % 5 != 0;
    }
    writer.add_document(doc, mask);
    writer.finish();
    content_.path = dir_.file("m.hstok");
    bytes_ = slurp(content_.path);
    info_ = read_shard_info(content_.path);
  }
  void reseal(std::vector<char>& b) const {
    const uint64_t at = info_.header.mask_offset();
    const uint32_t crc = crc32(b.data() + at, b.size() - at);
    std::memcpy(b.data() + kFieldMaskCrc, &crc, 4);
    const uint32_t header_crc = crc32(b.data(), kFieldHeaderCrc);
    std::memcpy(b.data() + kFieldHeaderCrc, &header_crc, 4);
  }
  ShardInfo info_;
};

TEST_F(CorruptMaskTest, MaskBitFlip) {
  const uint64_t at = info_.header.mask_offset();
  const Error e = error_after([&](auto& b) { b[at + 3] ^= 4; });
  EXPECT_EQ(e.code(), Errc::kData);
  EXPECT_EQ(e.offset(), at);
}

TEST_F(CorruptMaskTest, PaddingBitSetWithValidChecksum) {
  const uint64_t last = bytes_.size() - 1;
  const Error e = error_after([&](auto& b) {
    b[last] = char(b[last] | 0x80);
    reseal(b);
  });
  EXPECT_EQ(e.code(), Errc::kData);
  EXPECT_EQ(e.offset(), last);
}

TEST_F(CorruptMaskTest, UnknownFlag) {
  const Error e = error_after([&](auto& b) {
    b[kFieldFlags] |= 2;
    reseal(b);
  });
  EXPECT_EQ(e.code(), Errc::kData);
  EXPECT_EQ(e.offset(), kFieldFlags);
}

TEST_F(CorruptMaskTest, FlagClearedLeavesTrailingBytes) {
  const Error e = error_after([&](auto& b) {
    b[kFieldFlags] = 0;
    std::memset(b.data() + kFieldMaskCrc, 0, 4);
    const uint32_t header_crc = crc32(b.data(), kFieldHeaderCrc);
    std::memcpy(b.data() + kFieldHeaderCrc, &header_crc, 4);
  });
  EXPECT_EQ(e.code(), Errc::kData);
  EXPECT_EQ(e.offset(), info_.header.mask_offset());
}

TEST_F(CorruptMaskTest, MaskChecksumWithoutTheFlag) {
  const Error e = error_after([&](auto& b) {
    b[kFieldFlags] = 0;
    b.resize(info_.header.mask_offset());
    const uint32_t header_crc = crc32(b.data(), kFieldHeaderCrc);
    std::memcpy(b.data() + kFieldHeaderCrc, &header_crc, 4);
  });
  EXPECT_EQ(e.code(), Errc::kData);
  EXPECT_EQ(e.offset(), kFieldMaskCrc);
}

TEST_F(CorruptMaskTest, ReservedByteOfVersionTwo) {
  const Error e = error_after([&](auto& b) {
    b[kFieldReserved2 + 1] = 1;
    reseal(b);
  });
  EXPECT_EQ(e.code(), Errc::kData);
  EXPECT_EQ(e.offset(), kFieldReserved2 + 1);
}

TEST(CheckMaskBytesTest, CountsBitsAndRefusesPadding) {
  const std::byte full[2] = {std::byte{0xFF}, std::byte{0x07}};
  EXPECT_EQ(check_mask_bytes(full, 2, 0, 11, 100, "p"), 11u);
  EXPECT_EQ(check_mask_bytes(full + 1, 1, 1, 11, 101, "p"), 3u);  // from mask byte 1
  const std::byte pad[1] = {std::byte{0x08}};
  try {
    check_mask_bytes(pad, 1, 1, 11, 101, "p");
    FAIL() << "padding bit 11 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kData);
    EXPECT_EQ(e.offset(), 101u);
  }
  EXPECT_EQ(check_mask_bytes(full, 2, 0, 16, 0, "p"), 11u);  // no padding at 16 tokens
}

}  // namespace
}  // namespace hsring::data
