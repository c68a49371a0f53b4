// cached_layout (model/cuda_kv_cache.h), the host side of a forward through the KV cache:
// where each batch row's keys, values and query go, and which tiles the attention runs. A
// property test over random batches, then the refusals. No GPU needed.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/cuda_kv_cache.h"

namespace hsring {
namespace {

TEST(KvCacheLayoutTest, RowsAndTilesCoverEachSequencesNewPositionsOnce) {
  std::mt19937 random(7);
  for (int trial = 0; trial < 300; ++trial) {
    const uint32_t sequences = 1 + random() % 6, capacity = 20 + random() % 100;
    const uint32_t pack = 1u << (random() % 4);
    std::vector<int32_t> slots(sequences);
    for (uint32_t i = 0; i < sequences; ++i) slots[i] = int32_t(i);
    std::shuffle(slots.begin(), slots.end(), random);
    slots.resize(1 + random() % sequences);  // some slots take part, in any order
    std::vector<int32_t> offsets = {0}, positions, cached;
    for (size_t d = 0; d < slots.size(); ++d) {
      const auto before = int32_t(random() % (capacity / 2));
      const auto length = int32_t(1 + random() % (capacity - uint32_t(before)));
      cached.push_back(before);
      for (int32_t j = 0; j < length; ++j) positions.push_back(before + j);
      offsets.push_back(offsets.back() + length);
    }
    const CachedLayout layout =
        cached_layout(offsets, positions, slots, cached, sequences, capacity, pack);
    ASSERT_EQ(layout.rows.size(), positions.size());
    std::map<int32_t, int> covered;  // cache row -> tiles holding it
    for (const AttentionTile& tile : layout.tiles) {
      const int32_t end = std::min(tile.q_begin + int32_t(kAttentionTileRows / pack), tile.doc_end);
      ASSERT_LT(tile.q_begin, end);
      ASSERT_LE(tile.doc_begin, tile.q_begin);
      EXPECT_EQ(tile.doc_begin % int32_t(capacity), 0) << "a tile reads its slot from position 0";
      for (int32_t r = tile.q_begin; r < end; ++r) ++covered[r];
    }
    for (size_t d = 0; d < slots.size(); ++d)
      for (int32_t t = offsets[d]; t < offsets[d + 1]; ++t) {
        const int32_t want = slots[d] * int32_t(capacity) + positions[size_t(t)];
        EXPECT_EQ(layout.rows[size_t(t)], want);
        EXPECT_EQ(covered[want], 1) << "cache row " << want;
        covered.erase(want);
      }
    EXPECT_TRUE(covered.empty()) << "tiles over rows no batch row has";
  }
}

TEST(KvCacheLayoutTest, APrefixThatDoesNotDescribeTheBatchIsRefused) {
  const std::vector<int32_t> offsets = {0, 3, 5}, positions = {4, 5, 6, 0, 1};
  const std::vector<int32_t> slots = {1, 0}, cached = {4, 0};
  EXPECT_NO_THROW(cached_layout(offsets, positions, slots, cached, 2, 8, 1));
  const auto refused = [&](std::vector<int32_t> p, std::vector<int32_t> s, std::vector<int32_t> c,
                           uint32_t sequences, uint32_t capacity, const std::string& what) {
    try {
      cached_layout(offsets, p, s, c, sequences, capacity, 1);
      ADD_FAILURE() << "taken: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refused(positions, {1}, {4}, 2, 8, "1 slots and 1 cached lengths for 2 documents");
  refused(positions, {2, 0}, cached, 2, 8, "slot 2 of a cache of 2");
  refused(positions, slots, cached, 2, 6, "reaches position 7 of a slot of 6");
  refused({4, 6, 6, 0, 1}, slots, cached, 2, 8, "token 1 has position 6, not 5");
  refused(positions, slots, {-1, 0}, 2, 8, "reaches position");
}

}  // namespace
}  // namespace hsring
