// is_doc_partition (common/doc_offsets.h), the check behind every packed kernel's REQUIRES
// (tests/model/rope_test.cc shows one stopping a caller), and doc_partition_problem, the
// message of every batch check, which must agree with it.
#include "common/doc_offsets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace hsring {
namespace {

bool partitions(std::vector<int32_t> offsets, size_t rows) {
  return is_doc_partition(offsets, rows);
}

TEST(DocOffsets, PartitionsInOrderAreAccepted) {
  EXPECT_TRUE(partitions({0}, 0));
  EXPECT_TRUE(partitions({0, 1}, 1));
  EXPECT_TRUE(partitions({0, 3, 4, 9}, 9));
}

TEST(DocOffsets, EverythingElseIsRefused) {
  EXPECT_FALSE(partitions({}, 0));            // no offsets at all
  EXPECT_FALSE(partitions({1, 4}, 4));        // does not start at 0
  EXPECT_FALSE(partitions({0, 4}, 5));        // leaves rows out
  EXPECT_FALSE(partitions({0, 6}, 5));        // runs past the rows
  EXPECT_FALSE(partitions({0, 2, 2, 5}, 5));  // an empty document
  EXPECT_FALSE(partitions({0, 3, 2, 5}, 5));  // out of order
  EXPECT_FALSE(partitions({0, -1}, 0));       // negative
}
TEST(DocOffsets, ProblemsNameWhatIsWrong) {
  EXPECT_EQ(doc_partition_problem(std::vector<int32_t>{0, 3, 5}, 5), "");
  EXPECT_EQ(doc_partition_problem(std::vector<int32_t>{1, 4}, 4),
            "doc_offsets must run from 0 to the token count 4 (they run from 1 to 4)");
  EXPECT_EQ(doc_partition_problem(std::vector<int32_t>{}, 4, "label count"),
            "doc_offsets must run from 0 to the label count 4 (none given)");
  EXPECT_EQ(doc_partition_problem(std::vector<int32_t>{0, 3, 2, 5}, 5),
            "doc_offsets must increase strictly (entry 2 is 2 after 3)");
}

// Random offset lists, valid and not: the message is empty exactly when the partition
// holds with at least one document.
TEST(DocOffsets, ProblemAgreesWithThePartitionCheck) {
  std::mt19937 rng(7);
  int valid = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::vector<int32_t> offsets(rng() % 6);
    int32_t at = rng() % 4 == 0 ? int32_t(rng() % 3) - 1 : 0;
    for (int32_t& o : offsets) {
      o = at;
      at += int32_t(rng() % 4) - (rng() % 8 == 0 ? 2 : 0);
    }
    const size_t rows =
        offsets.empty() || rng() % 5 == 0 ? rng() % 8 : size_t(std::max(offsets.back(), 0));
    const bool holds = is_doc_partition(offsets, rows) && offsets.size() >= 2;
    valid += holds;
    EXPECT_EQ(doc_partition_problem(offsets, rows).empty(), holds)
        << "rows " << rows << ", " << offsets.size() << " offsets";
  }
  EXPECT_GT(valid, 1000) << "the generator must reach valid partitions too";
}

}  // namespace
}  // namespace hsring
