// The checkpoint format: bit-exact round trips, the documented layout, the encoder's
// refusals, and every single-bit flip of a small checkpoint caught.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <random>

#include "checkpoint/checkpoint_format.h"
#include "common/error.h"
#include "test_checkpoints.h"

namespace hsring::checkpoint {
namespace {

template <class T>
T field(const std::vector<std::byte>& f, uint64_t at) {
  T v;
  std::memcpy(&v, f.data() + at, sizeof v);
  return v;
}

// Decodes `bytes` expecting an Error; returns it (and checks it names the file).
Error decode_error(const std::vector<std::byte>& bytes, const std::string& path = "x") {
  try {
    decode_checkpoint(bytes, path);
  } catch (const Error& e) {
    EXPECT_EQ(e.path(), path);
    EXPECT_NE(std::string(e.what()).find(path + ": byte " + std::to_string(e.offset()) + ": "),
              std::string::npos)
        << e.what();
    return e;
  }
  ADD_FAILURE() << "decoded";
  return Error(Errc::kCheckpoint, "", "");
}

TEST(CheckpointFormatTest, RoundTripIsBitExact) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 50; ++i) {
    const Checkpoint c = test::random_checkpoint(rng, rng(), int(rng() % 8), 300);
    const std::vector<std::byte> bytes = encode_checkpoint(c);
    const Checkpoint back = decode_checkpoint(bytes, "mem");
    EXPECT_TRUE(bit_identical(c, back)) << i;
    EXPECT_EQ(encode_checkpoint(back), bytes) << "one encoding per checkpoint";
  }
}

TEST(CheckpointFormatTest, LayoutIsAsDocumented) {
  Checkpoint c;
  c.step = 7;
  c.metadata["a"] = "b";
  c.tensors.push_back({"w", {2}, {1.0f, -2.0f}});
  const std::vector<std::byte> f = encode_checkpoint(c);
  // table: metadata 8 + 1 + 1, tensor 32 + 8 (one dim) + 1 = 51 bytes at 64; data at 128.
  ASSERT_EQ(f.size(), 208u);
  EXPECT_EQ(std::memcmp(f.data(), "HSRCKPNT", 8), 0);
  EXPECT_EQ(field<uint32_t>(f, kFieldVersion), 1u);
  EXPECT_EQ(field<uint32_t>(f, kFieldHeaderSize), 64u);
  EXPECT_EQ(field<uint32_t>(f, kFieldMetadataCount), 1u);
  EXPECT_EQ(field<uint32_t>(f, kFieldTensorCount), 1u);
  EXPECT_EQ(field<uint64_t>(f, kFieldStep), 7u);
  EXPECT_EQ(field<uint64_t>(f, kFieldTableSize), 51u);
  EXPECT_EQ(field<uint64_t>(f, kFieldFileSize), 208u);
  EXPECT_EQ(field<uint32_t>(f, 64), 1u);    // key length
  EXPECT_EQ(field<uint32_t>(f, 68), 1u);    // value length
  EXPECT_EQ(field<uint32_t>(f, 74), 1u);    // name length
  EXPECT_EQ(field<uint32_t>(f, 78), 1u);    // dtype fp32
  EXPECT_EQ(field<uint32_t>(f, 82), 1u);    // rank
  EXPECT_EQ(field<uint64_t>(f, 90), 128u);  // data offset
  EXPECT_EQ(field<uint64_t>(f, 98), 2u);    // element count
  EXPECT_EQ(field<int64_t>(f, 106), 2);     // dim 0
  EXPECT_EQ(char(f[114]), 'w');
  EXPECT_EQ(field<float>(f, 128), 1.0f);
  EXPECT_EQ(field<float>(f, 132), -2.0f);
  EXPECT_EQ(std::memcmp(f.data() + 192, "HSRCKEND", 8), 0);
  for (uint64_t i = 115; i < 128; ++i) EXPECT_EQ(f[i], std::byte{0}) << i;
  for (uint64_t i = 136; i < 192; ++i) EXPECT_EQ(f[i], std::byte{0}) << i;
}

TEST(CheckpointFormatTest, EmptyCheckpointRoundTrips) {
  Checkpoint c;
  c.step = 0;
  const std::vector<std::byte> f = encode_checkpoint(c);
  EXPECT_EQ(f.size(), 80u);  // header, footer
  EXPECT_TRUE(bit_identical(decode_checkpoint(f, "e"), c));
}

TEST(CheckpointFormatTest, EncoderRefusesInvalidValues) {
  const auto refused = [](Checkpoint c, const std::string& message) {
    try {
      encode_checkpoint(c);
      ADD_FAILURE() << "encoded: " << message;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kCheckpoint);
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  Checkpoint ok;
  ok.step = 3;
  ok.tensors.push_back({"w", {2, 2}, {1, 2, 3, 4}});
  EXPECT_NO_THROW(encode_checkpoint(ok));

  Checkpoint c = ok;
  c.tensors.push_back(c.tensors[0]);
  refused(c, "appears twice");
  c = ok;
  c.tensors[0].name = "";
  refused(c, "name of 0 bytes");
  c = ok;
  c.tensors[0].data.pop_back();
  refused(c, "has 3 elements but its shape [2, 2] holds 4");
  c = ok;
  c.tensors[0].shape = {-2, -2};
  refused(c, "negative dimension");
  c = ok;
  c.tensors[0].shape = std::vector<int64_t>(9, 1);
  refused(c, "rank 9");
  c = ok;
  c.tensors[0].shape = {1ll << 30, 1ll << 30};
  refused(c, "more than 2^40");
  c = ok;
  c.metadata[""] = "x";
  refused(c, "metadata key");
  c = ok;
  c.metadata[std::string(kMaxNameBytes + 1, 'k')] = "x";
  refused(c, "metadata key");
}

TEST(CheckpointFormatTest, U64Metadata) {
  Checkpoint c;
  c.set_u64("pos", 18446744073709551615ull);
  EXPECT_EQ(c.get_u64("pos"), 18446744073709551615ull);
  EXPECT_EQ(c.get_u64("absent"), std::nullopt);
  for (const char* bad : {"", "12x", "-1", "18446744073709551616", " 1"}) {
    c.metadata["bad"] = bad;
    EXPECT_THROW(c.get_u64("bad"), Error) << bad;
  }
}

TEST(CheckpointFormatTest, ErrorsNameTheFieldAndByte) {
  std::mt19937_64 rng(2);
  const std::vector<std::byte> valid = encode_checkpoint(test::random_checkpoint(rng, 9, 3, 50));

  std::vector<std::byte> f = valid;
  f[3] = std::byte{'x'};
  Error e = decode_error(f);
  EXPECT_EQ(e.code(), Errc::kCheckpoint);
  EXPECT_EQ(e.offset(), 3u);

  f = valid;
  f[kFieldVersion] = std::byte{2};
  e = decode_error(f);
  EXPECT_EQ(e.code(), Errc::kCheckpoint);
  EXPECT_EQ(e.offset(), uint64_t(kFieldVersion));

  f = valid;
  f[kFieldStep] ^= std::byte{1};
  e = decode_error(f);
  EXPECT_EQ(e.code(), Errc::kCheckpoint);
  EXPECT_EQ(e.offset(), uint64_t(kFieldHeaderCrc));

  f = valid;
  f[kFieldFlags] = std::byte{1};
  test::reseal(f);
  e = decode_error(f);
  EXPECT_EQ(e.code(), Errc::kCheckpoint);
  EXPECT_EQ(e.offset(), uint64_t(kFieldFlags));

  f = valid;
  f.push_back(std::byte{0});
  e = decode_error(f);
  EXPECT_EQ(e.code(), Errc::kCheckpoint);
  EXPECT_EQ(e.offset(), valid.size());

  f = valid;
  f[kHeaderSize + 2] ^= std::byte{0x10};  // inside the table
  e = decode_error(f);
  EXPECT_EQ(e.code(), Errc::kCheckpoint);
  EXPECT_EQ(e.offset(), uint64_t(kHeaderSize));

  f = valid;
  f[valid.size() - kFooterSize - 1] ^= std::byte{0x80};  // data or padding
  e = decode_error(f);
  EXPECT_EQ(e.code(), Errc::kCheckpoint);
  EXPECT_EQ(e.offset(), valid.size() - 4);

  Checkpoint small;
  small.tensors.push_back({"w", {3}, {1, 2, 3}});  // data ends 12 bytes into its 64
  f = encode_checkpoint(small);
  f[f.size() - kFooterSize - 1] = std::byte{1};  // nonzero padding under a valid CRC
  test::reseal(f);
  e = decode_error(f);
  EXPECT_EQ(e.code(), Errc::kCheckpoint);
  EXPECT_EQ(e.offset(), f.size() - kFooterSize - 1);
}

// CRC-32 catches every single-bit error; the magic, version and size checks before it
// must not let one through either.
TEST(CheckpointFormatTest, EverySingleBitFlipIsRejected) {
  std::mt19937_64 rng(3);
  const std::vector<std::byte> valid = encode_checkpoint(test::random_checkpoint(rng, 4, 4, 120));
  ASSERT_LT(valid.size(), 4096u);
  std::vector<std::byte> f = valid;
  for (size_t byte = 0; byte < valid.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      f[byte] ^= std::byte(1u << bit);
      try {
        decode_checkpoint(f, "flip");
        ADD_FAILURE() << "bit " << bit << " of byte " << byte << " flipped, still decoded";
      } catch (const Error& e) {
        EXPECT_LT(e.offset(), valid.size());
      }
      f[byte] = valid[byte];
    }
  }
}

}  // namespace
}  // namespace hsring::checkpoint
