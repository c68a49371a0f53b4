// Fuzzing the decoder: random bytes, valid checkpoints mutated and resealed (so the checks
// behind the CRCs are reached), and headers of random fields over random tables. Every
// input is either an Error or a checkpoint that encodes back to exactly the same
// bytes; never a crash or an out-of-bounds read (these run under ASan too).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "checkpoint/checkpoint_format.h"
#include "common/crc32.h"
#include "common/error.h"
#include "test_checkpoints.h"

namespace hsring::checkpoint {
namespace {

// True when `bytes` decoded; then the checkpoint must be the one encoding of itself.
bool decodes_canonically(const std::vector<std::byte>& bytes) {
  try {
    const Checkpoint c = decode_checkpoint(bytes, "fuzz");
    EXPECT_EQ(encode_checkpoint(c), bytes) << "a decoded file that is not canonical";
    return true;
  } catch (const Error& e) {
    EXPECT_EQ(e.path(), "fuzz");
    EXPECT_LE(e.offset(), bytes.size()) << e.what();
    return false;
  }
}

TEST(CheckpointFuzzTest, RandomBytesAreRejected) {
  std::mt19937_64 rng(21);
  for (int i = 0; i < 5000; ++i) {
    std::vector<std::byte> bytes(rng() % 400);
    for (auto& b : bytes) b = std::byte(rng());
    if (i % 2 && bytes.size() >= 8) std::memcpy(bytes.data(), kCheckpointMagic.data(), 8);
    if (i % 4 == 3 && bytes.size() >= 12) {  // version 1, so the header CRC is reached
      const uint32_t version = kCheckpointVersion;
      std::memcpy(bytes.data() + kFieldVersion, &version, 4);
    }
    if (i % 8 == 7) test::reseal(bytes);
    EXPECT_FALSE(decodes_canonically(bytes)) << i;
  }
}

TEST(CheckpointFuzzTest, MutatedResealedCheckpointsNeverCrash) {
  std::mt19937_64 rng(22);
  int decoded = 0;
  for (int i = 0; i < 3000; ++i) {
    const std::vector<std::byte> valid =
        encode_checkpoint(test::random_checkpoint(rng, rng() % 100, 1 + int(rng() % 4), 40));
    std::vector<std::byte> f = valid;
    const uint64_t table_end = kHeaderSize + [&] {
      uint64_t t;
      std::memcpy(&t, f.data() + kFieldTableSize, 8);
      return t;
    }();
    const int mutations = 1 + int(rng() % 4);
    for (int m = 0; m < mutations; ++m) {
      // Mostly the header and table, where the structure is.
      const uint64_t at = rng() % 4 ? rng() % table_end : rng() % f.size();
      switch (rng() % 4) {
        case 0:
          f[at] = std::byte(rng());
          break;
        case 1:
          f[at] ^= std::byte(1u << (rng() % 8));
          break;
        case 2:
          f[at] = std::byte{0};
          break;
        default:
          f[at] = std::byte{0xFF};
          break;
      }
    }
    if (rng() % 8 == 0) f.resize(rng() % f.size());  // and sometimes cut
    if (i % 4) test::reseal(f);  // mostly resealed, so the field checks are reached
    decoded += decodes_canonically(f);
  }
  // Metadata values, names and tensor data can be rewritten consistently; the rest not.
  EXPECT_LT(decoded, 3000);
}

// A valid header over a random table: the table decoder sees arbitrary entries.
TEST(CheckpointFuzzTest, RandomTablesAreRejectedCleanly) {
  std::mt19937_64 rng(23);
  for (int i = 0; i < 5000; ++i) {
    CheckpointHeader h;
    h.metadata_count = uint32_t(rng() % 4);
    h.tensor_count = uint32_t(rng() % 4);
    h.step = rng();
    h.table_size = 8 * h.metadata_count + 32 * h.tensor_count + rng() % 200;
    std::vector<std::byte> table(h.table_size);
    for (auto& b : table) b = std::byte(rng() % 3 == 0 ? rng() : rng() % 4);
    h.table_crc = crc32(table.data(), table.size());
    h.file_size = h.data_offset() + 64 * (rng() % 4) + kFooterSize;
    std::vector<std::byte> f(h.file_size);
    const auto header = encode_header(h);
    std::memcpy(f.data(), header.data(), header.size());
    if (!table.empty()) std::memcpy(f.data() + kHeaderSize, table.data(), table.size());
    std::memcpy(f.data() + h.footer_offset(), kFooterMagic.data(), kFooterMagic.size());
    test::reseal(f);
    decodes_canonically(f);
  }
}

}  // namespace
}  // namespace hsring::checkpoint
