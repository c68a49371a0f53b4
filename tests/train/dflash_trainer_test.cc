// The DFlash trainer's labels under a loss mask: a row whose slot label is ignored (the
// target marks the rows before a masked-out token) is never a label, never makes an anchor
// a candidate by itself and never counts in the loss; a batch without ignored rows trains
// exactly as before the mask existed.
#include <gtest/gtest.h>

#include <algorithm>

#include "dflash_batches.h"
#include "train/dflash_blocks.h"
#include "train/dflash_trainer.h"

namespace hsring::train {
namespace {

using testing::OwnedDflashBatch;

DflashTrainer make_trainer(DflashLabels labels) {
  DflashTrainerOptions o;
  o.model = testing::small_dflash_config(1);
  const testing::OwnedTargetWeights target = testing::random_target(o.model, 5);
  o.embed = target.embed;
  o.lm_head = target.lm_head;
  o.seed = 6;
  o.threads = 1;
  o.anchors = 1000;  // every candidate: the test sees the whole candidate set
  o.labels = labels;
  return DflashTrainer(std::move(o));
}

// A slot batch: random features and tokens, the target's greedy labels every row (>= 0),
// with kIgnoreLabel at rows r where masked_next(r).
OwnedDflashBatch slot_batch(const std::function<bool(size_t)>& masked_next) {
  const DflashConfig c = testing::small_dflash_config(1);
  OwnedDflashBatch b = testing::random_dflash_batch(c, {0, 30, 52, 80}, 0, 9, 0);
  for (size_t r = 0; r < b.labels.size(); ++r)
    if (masked_next(r)) b.labels[r] = kIgnoreLabel;
  return b;
}

DrafterBatch view(const OwnedDflashBatch& b) {
  return DrafterBatch{b.features, b.tokens, b.positions, b.doc_offsets, b.labels};
}

// The rule before the loss mask: the next token within the document.
std::vector<int32_t> next_token_labels(const OwnedDflashBatch& b) {
  std::vector<int32_t> labels(b.tokens.size(), kIgnoreLabel);
  for (size_t d = 0; d + 1 < b.doc_offsets.size(); ++d)
    for (int32_t t = b.doc_offsets[d]; t + 1 < b.doc_offsets[d + 1]; ++t)
      labels[size_t(t)] = b.tokens[size_t(t) + 1];
  return labels;
}

TEST(DflashTrainerMaskTest, UnmaskedBatchKeepsTheNextTokenLabels) {
  DflashTrainer trainer = make_trainer(DflashLabels::kData);
  const OwnedDflashBatch b = slot_batch([](size_t) { return false; });
  trainer.compute_gradients(view(b));
  const std::vector<int32_t> expected = next_token_labels(b);
  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), trainer.last_labels().begin(),
                         trainer.last_labels().end()));
  const std::vector<int32_t> all = anchor_candidates(b.doc_offsets, expected, 4);
  EXPECT_TRUE(std::equal(all.begin(), all.end(), trainer.last_anchors().begin(),
                         trainer.last_anchors().end()));
}

TEST(DflashTrainerMaskTest, MaskedRowsAreNeverLabelsAnchorsOrCounted) {
  // Rows 0..19 of document 0 and all of document 2 are "prompt": their next token is
  // masked out. Document 1 alternates.
  const auto masked_next = [](size_t r) { return r < 20 || (r >= 52) || (r >= 30 && r % 3 == 0); };
  const OwnedDflashBatch b = slot_batch(masked_next);
  for (const DflashLabels kind : {DflashLabels::kData, DflashLabels::kTarget}) {
    DflashTrainer trainer = make_trainer(kind);
    const LossStats stats = trainer.compute_gradients(view(b));
    const auto labels = trainer.last_labels();
    for (size_t r = 0; r < labels.size(); ++r) {
      if (masked_next(r)) {
        ASSERT_EQ(labels[r], kIgnoreLabel) << "row " << r;
      }
    }
    // Every anchor's block scores at least one unmasked row (its first: the published rule
    // wants the token after the anchor trained), and no anchor lies in the masked
    // document 2, where no block could score anything.
    size_t counted_rows = 0;
    for (const int32_t a : trainer.last_anchors()) {
      EXPECT_LT(a, 52) << "anchor in the fully masked document";
      size_t scored = 0;
      const auto end = size_t(*std::upper_bound(b.doc_offsets.begin(), b.doc_offsets.end(), a));
      for (uint32_t j = 1; j < 4; ++j) scored += dflash_block_label(labels, size_t(a), j, end) >= 0;
      EXPECT_GT(scored, 0u) << "anchor " << a;
      counted_rows += scored;
    }
    EXPECT_FALSE(trainer.last_anchors().empty());
    EXPECT_EQ(stats.counted, counted_rows);  // the loss counts exactly the unmasked rows
  }
}

TEST(DflashTrainerMaskTest, DataLabelsReadOnlyTheSignOfTheSlotLabels) {
  // The target's greedy values do not matter to --labels data, only which rows are masked.
  const auto masked_next = [](size_t r) { return r % 4 == 1; };
  OwnedDflashBatch a = slot_batch(masked_next);
  OwnedDflashBatch b = a;
  for (int32_t& label : b.labels)
    if (label >= 0) label = (label + 5) % 13;
  DflashTrainer ta = make_trainer(DflashLabels::kData), tb = make_trainer(DflashLabels::kData);
  const LossStats sa = ta.compute_gradients(view(a)), sb = tb.compute_gradients(view(b));
  EXPECT_EQ(sa.loss, sb.loss);
  EXPECT_EQ(sa.counted, sb.counted);
  EXPECT_TRUE(std::equal(ta.last_labels().begin(), ta.last_labels().end(), tb.last_labels().begin(),
                         tb.last_labels().end()));
}

}  // namespace
}  // namespace hsring::train
