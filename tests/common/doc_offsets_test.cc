// is_doc_partition (common/doc_offsets.h), the check behind every packed kernel's REQUIRES
// (tests/model/rope_test.cc shows one stopping a caller).
#include "common/doc_offsets.h"

#include <gtest/gtest.h>

#include <cstdint>
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
}  // namespace
}  // namespace hsring
