// The wgmma tiles' shared-memory layout and descriptors (gpu/wgmma.cuh) against the PTX
// ISA's definition of what the tensor cores read, on the host (no GPU needed): for every
// element of every k step the kernels issue, the address the descriptor names under the
// ISA's canonical 128-byte-swizzle layouts is the one the loaders (offset_of) wrote it to.
// The GPU tests check the products themselves; this one says which rule was broken when a
// layout or a descriptor changes.
#include "gpu/wgmma.cuh"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>

namespace hsring::gpu::wgmma {
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

// The tile widths the kernels use: head_dim 128 (the drafter's block attention, the
// target's) and 256 (the target's, Qwen3.5 / 3.6).
constexpr int kWidths[] = {128, 256};

TEST(WgmmaLayoutTest, EveryRowChunkHasItsOwn16BytesOfTheTile) {
  for (const int columns : kWidths) {
    std::set<uint32_t> units;
    for (int row = 0; row < kTileRows; ++row)
      for (int chunk = 0; chunk < columns / 8; ++chunk) {
        const uint32_t offset = offset_of(row, chunk);
        ASSERT_EQ(offset % 16, 0u);
        ASSERT_LT(offset, tile_bytes(columns));
        units.insert(offset / 16);
      }
    EXPECT_EQ(units.size(), size_t(tile_bytes(columns) / 16)) << columns << " columns";
  }
}

// The swizzle's point: the eight rows of a row group that one product reads together, one
// chunk of each, fall in eight different 16-byte groups of banks.
TEST(WgmmaLayoutTest, EightRowsOfOneChunkSpreadOverAllBanks) {
  for (int group = 0; group < kTileRows / 8; ++group)
    for (int chunk = 0; chunk < 256 / 8; ++chunk) {
      std::set<uint32_t> bank_groups;
      for (int row = 8 * group; row < 8 * group + 8; ++row)
        bank_groups.insert(offset_of(row, chunk) / 16 % 8);
      EXPECT_EQ(bank_groups.size(), 8u) << "group " << group << ", chunk " << chunk;
    }
}

TEST(WgmmaLayoutTest, KMajorStepsReadTheirSixteenColumns) {
  for (int kk = 0; kk < 256 / 16; ++kk) {
    const Descriptor d = decode(k_major(kBase, kk));
    ASSERT_EQ(d.layout, 1u) << "the 128-byte swizzle";
    for (int row = 0; row < kTileRows; ++row)
      for (int k = 0; k < 16; ++k)
        ASSERT_EQ(k_major_address(d, row, k), stored_at(row, 16 * kk + k))
            << "k step " << kk << ", row " << row << ", column " << 16 * kk + k;
  }
}

// A product reads at most 128 columns MN-major (m64n128k16); a wider tile is read as
// products over its 128-column slices, the second starting two panels on.
TEST(WgmmaLayoutTest, MnMajorStepsReadTheirSixteenRows) {
  for (int slice = 0; slice < 2; ++slice)
    for (int kk = 0; kk < kTileRows / 16; ++kk) {
      const Descriptor d = decode(mn_major(kBase + uint32_t(slice) * 2 * kPanelBytes, kk));
      ASSERT_EQ(d.layout, 1u) << "the 128-byte swizzle";
      for (int k = 0; k < 16; ++k)
        for (int column = 0; column < 128; ++column)
          ASSERT_EQ(mn_major_address(d, column, k), stored_at(16 * kk + k, 128 * slice + column))
              << "slice " << slice << ", k step " << kk << ", row " << 16 * kk + k << ", column "
              << 128 * slice + column;
    }
}

// The descriptor keeps 14 bits of address >> 4: every tile of the kernels (at most 227 KB of
// shared memory) fits.
TEST(WgmmaLayoutTest, DescriptorsHoldTheAddressesOfAllSharedMemory) {
  const uint32_t last_tile = 227 * 1024 - tile_bytes(256);
  EXPECT_EQ(decode(k_major(last_tile, 0)).start, last_tile);
  EXPECT_EQ(decode(mn_major(last_tile, 3)).start, last_tile + 3 * 2 * kAtomBytes);
}

}  // namespace
}  // namespace hsring::gpu::wgmma
