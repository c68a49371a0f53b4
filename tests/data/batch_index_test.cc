// Packing invariants over random corpora (property tests) and the epoch permutation.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "common/error.h"
#include "data/batch_index.h"
#include "data/permutation.h"

namespace hsring::data {
namespace {

using DocTables = std::vector<std::vector<uint64_t>>;

DocTables random_tables(std::mt19937_64& rng, uint32_t max_doc) {
  DocTables tables(1 + rng() % 5);
  for (auto& table : tables) {
    table = {0};
    const uint32_t docs = uint32_t(rng() % 60);
    for (uint32_t d = 0; d < docs; ++d)
      table.push_back(table.back() + (rng() % 9 == 0 ? 0 : rng() % (max_doc + 1)));
  }
  if (tables[0].size() == 1 || tables[0].back() == 0) tables[0].push_back(1 + rng() % 10);
  return tables;
}

// The document of shard `s` that holds token `t`.
size_t doc_of(const std::vector<uint64_t>& offsets, uint64_t t) {
  return size_t(std::upper_bound(offsets.begin(), offsets.end(), t) - offsets.begin()) - 1;
}

TEST(PermutationTest, IsABijectionForEverySize) {
  for (uint64_t n : {1ull, 2ull, 3ull, 5ull, 16ull, 17ull, 100ull, 1000ull, 4097ull}) {
    for (uint64_t key : {0ull, 1ull, 0xDEADBEEFull}) {
      std::vector<bool> seen(n, false);
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t p = permute_index(i, n, key);
        ASSERT_LT(p, n);
        ASSERT_FALSE(seen[p]) << "n " << n << " key " << key << " repeats " << p;
        seen[p] = true;
      }
    }
  }
}

TEST(BatchIndexTest, PackingInvariantsOverRandomCorpora) {
  std::mt19937_64 rng(21);
  for (int trial = 0; trial < 300; ++trial) {
    const DocTables tables = random_tables(rng, 1 + uint32_t(rng() % 400));
    PackOptions options;
    options.max_tokens = 1 + uint32_t(rng() % 300);
    options.seed = rng();
    options.window = 1 + uint32_t(rng() % 64);
    const BatchIndex index(tables, options);
    const uint64_t n = index.batches_per_epoch();
    ASSERT_GT(n, 0u);

    // One epoch: every token of every shard exactly once, within budget, pieces inside
    // one document, each full piece of a split document at the budget.
    for (uint64_t epoch : {0ull, 3ull}) {
      std::vector<std::vector<uint32_t>> covered(tables.size());
      for (size_t s = 0; s < tables.size(); ++s) covered[s].assign(tables[s].back(), 0);
      std::set<uint64_t> indexes;
      for (uint64_t id = epoch * n; id < (epoch + 1) * n; ++id) {
        const BatchRef ref = index.batch(id);
        ASSERT_EQ(ref.epoch, epoch);
        indexes.insert(ref.index);
        ASSERT_FALSE(ref.pieces.empty());
        ASSERT_LE(ref.token_count, options.max_tokens);
        uint32_t longest = 0;
        for (const Piece& p : ref.pieces) {
          ASSERT_GT(p.length, 0u);
          const auto& off = tables[p.shard];
          const size_t d = doc_of(off, p.begin);
          ASSERT_LE(p.begin + p.length, off[d + 1]) << "a piece crosses a document end";
          // Documents are cut at multiples of the budget from their start.
          ASSERT_EQ((p.begin - off[d]) % options.max_tokens, 0u);
          for (uint64_t t = p.begin; t < p.begin + p.length; ++t) ++covered[p.shard][t];
          longest = std::max(longest, p.length);
        }
        EXPECT_EQ(ref.length_bucket, BatchIndex::length_bucket(longest, options.max_tokens));
      }
      EXPECT_EQ(indexes.size(), n) << "an epoch repeats a batch";
      for (size_t s = 0; s < tables.size(); ++s)
        for (uint64_t t = 0; t < covered[s].size(); ++t)
          ASSERT_EQ(covered[s][t], 1u) << "shard " << s << " token " << t;
    }
  }
}

TEST(BatchIndexTest, DeterministicAndSeeded) {
  std::mt19937_64 rng(22);
  const DocTables tables = random_tables(rng, 200);
  PackOptions options{64, 5, 16};
  const BatchIndex a(tables, options), b(tables, options);
  ASSERT_EQ(a.batches_per_epoch(), b.batches_per_epoch());
  for (uint64_t id = 0; id < 3 * a.batches_per_epoch(); ++id) {
    const BatchRef x = a.batch(id), y = b.batch(id);
    ASSERT_EQ(x.index, y.index);
    ASSERT_TRUE(std::equal(x.pieces.begin(), x.pieces.end(), y.pieces.begin(), y.pieces.end(),
                           [](const Piece& p, const Piece& q) {
                             return p.shard == q.shard && p.begin == q.begin &&
                                    p.length == q.length;
                           }));
  }
  // Epochs differ in order (with enough batches for that to be near certain).
  if (a.batches_per_epoch() > 8) {
    int same = 0;
    for (uint64_t i = 0; i < a.batches_per_epoch(); ++i)
      same += a.batch_at(0, i) == a.batch_at(1, i);
    EXPECT_LT(same, int(a.batches_per_epoch()));
  }
}

TEST(BatchIndexTest, PacksTightly) {
  // Many short documents: best-fit decreasing should fill batches almost completely.
  DocTables tables{{0}};
  std::mt19937_64 rng(23);
  for (int d = 0; d < 5000; ++d) tables[0].push_back(tables[0].back() + 1 + rng() % 100);
  const BatchIndex index(tables, PackOptions{1024, 0, 4096});
  const double fill = double(index.token_count()) / double(index.batches_per_epoch() * 1024);
  EXPECT_GT(fill, 0.97);
}

TEST(BatchIndexTest, LengthBuckets) {
  EXPECT_EQ(BatchIndex::length_bucket(512, 512), 7u);
  EXPECT_EQ(BatchIndex::length_bucket(257, 512), 7u);
  EXPECT_EQ(BatchIndex::length_bucket(256, 512), 6u);
  EXPECT_EQ(BatchIndex::length_bucket(129, 512), 6u);
  EXPECT_EQ(BatchIndex::length_bucket(128, 512), 5u);
  EXPECT_EQ(BatchIndex::length_bucket(1, 512), 0u);
}

TEST(BatchIndexTest, BadOptionsAndEmptyCorpora) {
  const DocTables tables{{0, 10}};
  EXPECT_THROW(BatchIndex(tables, PackOptions{0, 0, 16}), Error);
  EXPECT_THROW(BatchIndex(tables, PackOptions{16, 0, 0}), Error);
  EXPECT_THROW(BatchIndex(DocTables{{0, 0, 0}}, PackOptions{}), Error);
}

}  // namespace
}  // namespace hsring::data
