// SlotView: a claimed slot's arrays and rows bounded by its header, checked against the
// ring's shape in one place; out of bounds, nothing is handed out.
#include "shm/slot_view.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "common/contract.h"
#include "tests/shm/ring_test_util.h"
#include "worker/synthetic_batch.h"

namespace hsring {
namespace {

class SlotViewTest : public ::testing::Test {
 protected:
  void SetUp() override { ring_ = Ring::create(name_.str(), shape_); }

  // Writes batch `batch_id` into slot `slot` with its header, as a publish leaves it.
  BatchPlan write(uint32_t slot, uint64_t batch_id) {
    const BatchPlan plan = plan_batch(batch_id, shape_);
    fill_synthetic_batch(*ring_, slot, plan);
    set_header(slot, batch_id, plan.token_count, plan.num_docs);
    return plan;
  }
  void set_header(uint32_t slot, uint64_t batch_id, uint32_t tokens, uint32_t docs) {
    SlotHeader& h = ring_->slot(slot);
    h.batch_id.store(batch_id);
    h.token_count.store(tokens);
    h.num_docs.store(docs);
  }

  RingShape shape_ = test::tiny_shape();
  test::ScopedRingName name_{"slot-view"};
  std::unique_ptr<Ring> ring_;
};

TEST_F(SlotViewTest, SpansHaveTheHeadersLengthsAndPointIntoTheSlot) {
  const BatchPlan plan = write(3, 41);
  const SlotView view(*ring_, 3);
  ASSERT_TRUE(view.in_bounds()) << view.bounds_problem();
  EXPECT_EQ(view.bounds_problem(), "");
  EXPECT_EQ(view.slot(), 3u);
  EXPECT_EQ(view.batch_id(), 41u);
  EXPECT_EQ(view.token_count(), plan.token_count);
  EXPECT_EQ(view.num_docs(), plan.num_docs);
  EXPECT_EQ(view.rows(), plan.token_count);
  EXPECT_EQ(view.tokens().data(), ring_->tokens(3));
  EXPECT_EQ(view.tokens().size(), plan.token_count);
  EXPECT_EQ(view.positions().data(), ring_->positions(3));
  EXPECT_EQ(view.positions().size(), plan.token_count);
  EXPECT_EQ(view.labels().data(), ring_->labels(3));
  EXPECT_EQ(view.labels().size(), plan.token_count);
  EXPECT_EQ(view.doc_offsets().data(), ring_->doc_offsets(3));
  EXPECT_EQ(view.doc_offsets().size(), plan.num_docs + 1u);
  EXPECT_EQ(view.doc_offsets().back(), int32_t(plan.token_count));
  const uint64_t row_bytes = uint64_t(shape_.hidden_size) * dtype_size(shape_.dtype);
  for (uint32_t k = 0; k < shape_.num_layers; ++k) {
    const LayerRows rows = view.layer(k);
    EXPECT_EQ(rows.first, ring_->layer_region(3, k));
    EXPECT_EQ(rows.pitch, row_bytes);
    EXPECT_EQ(view.region_bytes(k).data(), ring_->layer_region(3, k));
    EXPECT_EQ(view.region_bytes(k).size(), plan.token_count * row_bytes);
  }
}

TEST_F(SlotViewTest, EdgesOfTheBoundsAreInside) {
  write(0, 0);
  set_header(0, 0, shape_.max_tokens, shape_.max_tokens);  // every token its own document
  const SlotView full(*ring_, 0);
  EXPECT_TRUE(full.in_bounds());
  EXPECT_EQ(full.tokens().size(), shape_.max_tokens);
  EXPECT_EQ(full.doc_offsets().size(), shape_.max_tokens + 1u);
  set_header(0, 0, 1, 1);
  EXPECT_TRUE(SlotView(*ring_, 0).in_bounds());
}

TEST_F(SlotViewTest, HeaderOutsideTheShapeHandsOutNothing) {
  write(1, 9);
  struct Case {
    uint32_t tokens, docs;
    const char* problem;
  };
  const Case cases[] = {
      {shape_.max_tokens + 1, 1, "token count 17 outside [1, 16]"},
      {0, 1, "token count 0 outside [1, 16]"},
      {0xFFFFFFFFu, 1, "token count 4294967295 outside [1, 16]"},
      {4, 0, "document count 0 outside [1, 4]"},
      {4, 5, "document count 5 outside [1, 4]"},
      {4, 0xFFFFFFFFu, "document count 4294967295 outside [1, 4]"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.tokens) + " tokens, " + std::to_string(c.docs) + " docs");
    set_header(1, 9, c.tokens, c.docs);
    const SlotView view(*ring_, 1);
    EXPECT_FALSE(view.in_bounds());
    EXPECT_EQ(view.bounds_problem(), c.problem);
    EXPECT_EQ(view.token_count(), c.tokens) << "the header as it says";
    EXPECT_TRUE(view.tokens().empty());
    EXPECT_TRUE(view.positions().empty());
    EXPECT_TRUE(view.labels().empty());
    EXPECT_TRUE(view.doc_offsets().empty());
    EXPECT_EQ(view.rows(), 0u);
    EXPECT_EQ(view.layer(0).first, nullptr);
    EXPECT_TRUE(view.region_bytes(0).empty());
  }
}

TEST_F(SlotViewTest, ConcatenatedLayoutHasOneRegionOfEveryLayersRows) {
  shape_.split_layers = 0;
  const test::ScopedRingName concatenated("slot-view-concat");
  ring_ = Ring::create(concatenated.str(), shape_);
  const BatchPlan plan = write(2, 5);
  const SlotView view(*ring_, 2);
  ASSERT_TRUE(view.in_bounds());
  const uint64_t row_bytes = uint64_t(shape_.hidden_size) * dtype_size(shape_.dtype);
  EXPECT_EQ(view.region_bytes(0).data(), ring_->payload(2));
  EXPECT_EQ(view.region_bytes(0).size(), plan.token_count * row_bytes * shape_.num_layers);
  for (uint32_t k = 0; k < shape_.num_layers; ++k) {
    EXPECT_EQ(view.layer(k).first, ring_->payload(2) + k * row_bytes);
    EXPECT_EQ(view.layer(k).pitch, row_bytes * shape_.num_layers);
    EXPECT_EQ(view.layer(k).row_bytes, row_bytes);
  }
}

TEST_F(SlotViewTest, DefaultViewIsEmpty) {
  const SlotView view;
  EXPECT_FALSE(view.in_bounds());
  EXPECT_EQ(view.layers(), 0u);
  EXPECT_TRUE(view.tokens().empty());
  EXPECT_TRUE(view.region_bytes(0).empty());
}

// The REQUIRES: contracts behind the view and the ring's accessors abort where contracts
// are checked (sanitizer builds, builds without NDEBUG); elsewhere they compile out.
#if HSRING_CONTRACTS_ACTIVE
TEST_F(SlotViewTest, ViolatedContractsAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  write(0, 0);
  const SlotView view(*ring_, 0);
  EXPECT_DEATH((void)view.layer(shape_.num_layers), "contract violated: layer < layers\\(\\)");
  EXPECT_DEATH((void)ring_->slot(shape_.slot_count), "contract violated: index < slot_count\\(\\)");
  EXPECT_DEATH((void)ring_->layer_region(0, shape_.num_layers), "contract violated");
  EXPECT_DEATH((void)compute_layout(RingShape{.slot_count = 0}), "contract violated");
}
#else
TEST_F(SlotViewTest, ViolatedContractsAbort) {
  GTEST_SKIP() << "contracts are compiled out of this build (NDEBUG, no sanitizer)";
}
#endif

}  // namespace
}  // namespace hsring
