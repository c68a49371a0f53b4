// The wgmma tiles' shared-memory layout and descriptors (train/wgmma.cuh) against the PTX
// ISA's definition of what the tensor cores read, on the host (no GPU needed): for every
// element of every k step the kernels issue, the address the descriptor names under the
// ISA's canonical 128-byte-swizzle layouts is the one the loaders (offset_of) wrote it to.
// The GPU tests check the products themselves; this one says which rule was broken when a
// layout or a descriptor changes.
#include "train/wgmma.cuh"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>

namespace hsring::train::wgmma {
namespace {

constexpr uint32_t kBase = 0x5000;  // a tile's shared-memory address: 1024-byte aligned

struct Descriptor {
  uint32_t start, lbo, sbo, layout;
};

Descriptor decode(uint64_t d) {
  return {uint32_t(d & 0x3FFF) << 4, uint32_t((d >> 16) & 0x3FFF) << 4,
          uint32_t((d >> 32) & 0x3FFF) << 4, uint32_t(d >> 62)};
}

// Swizzle<3, 4, 3>: address bits [4, 7) XORed with bits [7, 10).
uint32_t swizzle_128b(uint32_t address) { return address ^ (((address >> 7) & 7) << 4); }

// Byte address of bf16 element (mn, k) of one k step (k < 16) read K-major: the canonical
// layout ((8, m), (T, 2k)) : ((8T, SBO), (1, T)), T = 8 elements of 16 bytes.
uint32_t k_major_address(const Descriptor& d, int mn, int k) {
  return swizzle_128b(d.start + uint32_t(mn % 8) * 128 + uint32_t(mn / 8) * d.sbo +
                      uint32_t(k) * 2);
}

// Byte address of bf16 element (mn, k) of one k step read MN-major: the canonical layout
// ((T, 8, m), (8, k)) : ((1, T, LBO), (8T, SBO)).
uint32_t mn_major_address(const Descriptor& d, int mn, int k) {
  return swizzle_128b(d.start + uint32_t(mn % 64) * 2 + uint32_t(mn / 64) * d.lbo +
                      uint32_t(k % 8) * 128 + uint32_t(k / 8) * d.sbo);
}

// Where the loaders put tile element (row, column).
uint32_t stored_at(int row, int column) {
  return kBase + offset_of(row, column / 8) + uint32_t(column % 8) * 2;
}

TEST(WgmmaLayoutTest, EveryRowChunkHasItsOwn16BytesOfTheTile) {
  std::set<uint32_t> units;
  for (int row = 0; row < kTileRows; ++row)
    for (int chunk = 0; chunk < kColumns / 8; ++chunk) {
      const uint32_t offset = offset_of(row, chunk);
      ASSERT_EQ(offset % 16, 0u);
      ASSERT_LT(offset, kTileBytes);
      units.insert(offset / 16);
    }
  EXPECT_EQ(units.size(), size_t(kTileBytes / 16));
}

// The swizzle's point: the eight rows of a row group that one product reads together, one
// chunk of each, fall in eight different 16-byte groups of banks.
TEST(WgmmaLayoutTest, EightRowsOfOneChunkSpreadOverAllBanks) {
  for (int group = 0; group < kTileRows / 8; ++group)
    for (int chunk = 0; chunk < kColumns / 8; ++chunk) {
      std::set<uint32_t> bank_groups;
      for (int row = 8 * group; row < 8 * group + 8; ++row)
        bank_groups.insert(offset_of(row, chunk) / 16 % 8);
      EXPECT_EQ(bank_groups.size(), 8u) << "group " << group << ", chunk " << chunk;
    }
}

TEST(WgmmaLayoutTest, KMajorStepsReadTheirSixteenColumns) {
  for (int kk = 0; kk < kColumns / 16; ++kk) {
    const Descriptor d = decode(k_major(kBase, kk));
    ASSERT_EQ(d.layout, 1u) << "the 128-byte swizzle";
    for (int row = 0; row < kTileRows; ++row)
      for (int k = 0; k < 16; ++k)
        ASSERT_EQ(k_major_address(d, row, k), stored_at(row, 16 * kk + k))
            << "k step " << kk << ", row " << row << ", column " << 16 * kk + k;
  }
}

TEST(WgmmaLayoutTest, MnMajorStepsReadTheirSixteenRows) {
  for (int kk = 0; kk < kTileRows / 16; ++kk) {
    const Descriptor d = decode(mn_major(kBase, kk));
    ASSERT_EQ(d.layout, 1u) << "the 128-byte swizzle";
    for (int k = 0; k < 16; ++k)
      for (int column = 0; column < kColumns; ++column)
        ASSERT_EQ(mn_major_address(d, column, k), stored_at(16 * kk + k, column))
            << "k step " << kk << ", row " << 16 * kk + k << ", column " << column;
  }
}

// The descriptor keeps 14 bits of address >> 4: every tile of the kernels (at most 227 KB of
// shared memory) fits.
TEST(WgmmaLayoutTest, DescriptorsHoldTheAddressesOfAllSharedMemory) {
  const uint32_t last_tile = 227 * 1024 - kTileBytes;
  EXPECT_EQ(decode(k_major(last_tile, 0)).start, last_tile);
  EXPECT_EQ(decode(mn_major(last_tile, 3)).start, last_tile + 3 * 2 * kAtomBytes);
}

}  // namespace
}  // namespace hsring::train::wgmma
