// The real target's batch source: batch X's slot content is a pure function of X whether
// it came through the read-ahead or a direct read (as an adopted batch does), its plan
// matches what it writes, bad data is refused with the file named, and the drafter's
// model-batch check accepts what the source writes and catches what a torn slot shows.
#include "target_proc/model_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>

#include "../data/test_corpus.h"
#include "common/error.h"
#include "data/batch_index.h"
#include "data/corpus.h"
#include "data/held_out.h"
#include "data/token_batch.h"
#include "model/cpu_target_model.h"
#include "shm/ring.h"
#include "worker/model_batch_check.h"

namespace hsring {
namespace {

using data::testing::TempDir;

class ScopedRing {
 public:
  explicit ScopedRing(const RingShape& shape) {
    static int counter = 0;
    name_ = "hsring-target-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    Ring::remove(name_);
    ring_ = Ring::create(name_, shape);
  }
  ~ScopedRing() {
    ring_.reset();
    Ring::remove(name_);
  }
  Ring& operator*() const { return *ring_; }

 private:
  std::string name_;
  std::unique_ptr<Ring> ring_;
};

RingShape model_ring_shape(bool split, uint32_t targets) {
  const ModelConfig c = named_model_config("tiny");
  RingShape s;
  s.slot_count = 6;
  s.max_tokens = 40;
  s.hidden_size = c.hidden_size;
  s.num_layers = 3;
  s.dtype = DType::kBF16;
  s.split_layers = split ? 1 : 0;
  s.num_targets = targets;
  s.num_drafters = 1;
  s.content = PayloadContent::kModel;
  s.vocab_size = c.vocab_size;
  s.ledger_capacity = 256;
  const std::vector<int32_t> ids = default_capture_layers(c.num_layers, s.num_layers);
  std::copy(ids.begin(), ids.end(), s.layer_ids);
  return s;
}

// A corpus of byte tokens (vocab 256, the tiny model's) in `dir`.
void write_byte_corpus(const std::string& dir, uint64_t seed) {
  std::mt19937_64 rng(seed);
  data::testing::write_random_shard(dir + "/a.hstok", rng, 30, 50, 1, 256);
  data::testing::write_random_shard(dir + "/b.hstok", rng, 20, 90, 2, 256);
}

std::unique_ptr<ModelSource> make_source(const Ring& ring, const std::string& dir, uint32_t target,
                                         uint32_t read_ahead = 3) {
  auto model = open_cpu_model("tiny", 5, CpuModelOptions{1});
  auto writer = std::make_unique<ModelSlotWriter>(std::move(model), ring.shape());
  return std::make_unique<ModelSource>(std::move(writer), ring, target,
                                       ModelSourceOptions{dir, 9, read_ahead});
}

// Writes the header fields a publication would, so the slot can be checked as a drafter sees it.
void stamp_header(const Ring& ring, uint32_t slot, const BatchPlan& plan) {
  ring.slot(slot).token_count.store(plan.token_count, std::memory_order_relaxed);
  ring.slot(slot).num_docs.store(plan.num_docs, std::memory_order_relaxed);
}

// The bytes of slot `slot` that a batch of `tokens` tokens defines.
std::vector<std::byte> used_bytes(const Ring& ring, uint32_t slot, uint32_t tokens) {
  const RingShape& s = ring.shape();
  std::vector<std::byte> out;
  const uint64_t row =
      uint64_t(s.hidden_size) * dtype_size(s.dtype) * (s.split_layers ? 1 : s.num_layers);
  for (uint32_t k = 0; k < (s.split_layers ? s.num_layers : 1); ++k) {
    const std::byte* p = ring.layer_region(slot, k);
    out.insert(out.end(), p, p + row * tokens);
  }
  for (const int32_t* array : {ring.tokens(slot), ring.positions(slot), ring.labels(slot)}) {
    const auto* p = reinterpret_cast<const std::byte*>(array);
    out.insert(out.end(), p, p + 4 * tokens);
  }
  return out;
}

class ModelSourceTest : public ::testing::TestWithParam<bool> {};

TEST_P(ModelSourceTest, ReadAheadAndDirectReadsWriteIdenticalSlots) {
  TempDir dir;
  write_byte_corpus(dir.path(), 1);
  ScopedRing ring(model_ring_shape(GetParam(), 2));
  // Target 1 of 2 produces 1, 3, 5, 7 in order: through its read-ahead.
  auto in_order = make_source(*ring, dir.path(), 1);
  std::vector<std::vector<std::byte>> expected;
  for (uint64_t id : {1, 3, 5, 7}) {
    const BatchPlan plan = in_order->plan(id);
    in_order->produce(plan, *ring, 0);
    stamp_header(*ring, 0, plan);
    EXPECT_EQ(check_model_batch(*ring, 0), "") << "batch " << id;
    expected.push_back(used_bytes(*ring, 0, plan.token_count));
  }
  ASSERT_NE(in_order->reader_stats(), nullptr);
  EXPECT_EQ(in_order->reader_stats()->batches, 4u);
  // A restarted target adopts 5 first (a direct read), then goes on with 7 and 1 (out of
  // its shard order: direct reads too): every byte must match.
  auto restarted = make_source(*ring, dir.path(), 1);
  const uint64_t ids[] = {5, 7, 1};
  const size_t where[] = {2, 3, 0};
  for (int i = 0; i < 3; ++i) {
    const BatchPlan plan = restarted->plan(ids[i]);
    restarted->produce(plan, *ring, 1);
    EXPECT_EQ(used_bytes(*ring, 1, plan.token_count), expected[where[i]]) << "batch " << ids[i];
  }
}

TEST_P(ModelSourceTest, PlanAndTokensFollowTheBatchIndex) {
  TempDir dir;
  write_byte_corpus(dir.path(), 2);
  ScopedRing ring(model_ring_shape(GetParam(), 1));
  auto source = make_source(*ring, dir.path(), 0);
  data::CorpusOptions options;
  const data::Corpus corpus = data::Corpus::open(dir.path(), options);
  // The corpus's last documents are held out (data/held_out.h): 3 of these 50 are never read.
  const data::BatchIndex index(data::training_doc_offsets(corpus), data::PackOptions{40, 9});
  const std::vector<uint64_t>& b = corpus.shards()[1].doc_offsets;
  ASSERT_EQ(data::held_out_document_count(corpus.doc_count()), 3u);
  EXPECT_EQ(index.token_count(), corpus.token_count() - (b.back() - b[b.size() - 4]));
  // Past one epoch too: ids wrap into later epochs.
  for (uint64_t id = 0; id < index.batches_per_epoch() + 3; ++id) {
    const BatchPlan plan = source->plan(id);
    const data::TokenBatch batch = data::read_batch(corpus, index, id);
    ASSERT_EQ(plan.token_count, batch.token_count());
    ASSERT_EQ(plan.num_docs, batch.num_docs());
    ASSERT_EQ(plan.length_bucket, batch.length_bucket);
    source->produce(plan, *ring, 2);
    ASSERT_EQ(std::memcmp(ring.operator*().tokens(2), batch.tokens.data(), 4 * batch.tokens.size()),
              0);
    ASSERT_EQ(
        std::memcmp((*ring).doc_offsets(2), batch.doc_offsets.data(), 4 * batch.doc_offsets.size()),
        0);
  }
}

// Across machines (--nnodes 2, 2 targets each): node R's ring batch X carries corpus batch
// 2X + R, through the read-ahead and through a direct read alike, so the machines train on
// disjoint halves of the data that together cover it.
TEST_P(ModelSourceTest, EachNodeReadsItsOwnShareOfTheData) {
  TempDir dir;
  write_byte_corpus(dir.path(), 3);
  const data::Corpus corpus = data::Corpus::open(dir.path(), data::CorpusOptions{});
  const data::BatchIndex index(data::training_doc_offsets(corpus), data::PackOptions{40, 9});
  std::set<uint64_t> covered;
  for (uint32_t node = 0; node < 2; ++node) {
    ScopedRing ring(model_ring_shape(GetParam(), 2));
    for (uint32_t target = 0; target < 2; ++target) {
      auto model = open_cpu_model("tiny", 5, CpuModelOptions{1});
      auto writer = std::make_unique<ModelSlotWriter>(std::move(model), (*ring).shape());
      ModelSourceOptions options{dir.path(), 9, 3};
      options.nnodes = 2;
      options.node_rank = node;
      ModelSource source(std::move(writer), *ring, target, options);
      // Its own batches in order (the read-ahead), then one of the other target's (direct).
      for (uint64_t id :
           {uint64_t(target), uint64_t(target) + 2, uint64_t(target) + 4, uint64_t(1 - target)}) {
        const uint64_t expected = id * 2 + node;
        const BatchPlan plan = source.plan(id);
        const data::TokenBatch batch = data::read_batch(corpus, index, expected);
        ASSERT_EQ(plan.token_count, batch.token_count()) << "node " << node << " batch " << id;
        source.produce(plan, *ring, 0);
        ASSERT_EQ(std::memcmp((*ring).tokens(0), batch.tokens.data(), 4 * batch.tokens.size()), 0)
            << "node " << node << " batch " << id;
        covered.insert(expected);
      }
    }
  }
  // Nodes 0 and 1 read ids 0..5 of their shares: corpus batches 0..11, each once.
  EXPECT_EQ(covered.size(), 12u);
  EXPECT_EQ(*covered.rbegin(), 11u);
}

INSTANTIATE_TEST_SUITE_P(Layouts, ModelSourceTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Split" : "Concatenated"; });

TEST(ModelSourceErrors, RefusesAVocabularyLargerThanTheModels) {
  TempDir dir;
  std::mt19937_64 rng(3);
  data::testing::write_random_shard(dir.path() + "/wide.hstok", rng, 5, 20, 2, 50000);
  ScopedRing ring(model_ring_shape(true, 1));
  try {
    make_source(*ring, dir.path(), 0);
    FAIL() << "a 50000-token vocabulary fed a 256-token model";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("wide.hstok"), std::string::npos) << message;
    EXPECT_NE(message.find("50000"), std::string::npos) << message;
  }
}

TEST(ModelSourceErrors, RefusesAMissingOrEmptyFolder) {
  TempDir dir;
  ScopedRing ring(model_ring_shape(true, 1));
  EXPECT_ANY_THROW(make_source(*ring, dir.path() + "/nowhere", 0));
  EXPECT_ANY_THROW(make_source(*ring, dir.path(), 0));  // no shards
}

// A corpus with a loss mask: the slot's labels row is the target's greedy token at every row
// except where the next token of the sequence is masked out, which carries -100; the same
// corpus without the mask gives the greedy tokens at every row, as before the mask.
TEST(ModelSourceMaskTest, SlotLabelsAreGreedyExceptBeforeMaskedTokens) {
  TempDir masked_dir, plain_dir;
  std::mt19937_64 rng(3);
  const auto content =
      data::testing::write_random_shard(masked_dir.path() + "/a.hstok", rng, 30, 50, 1, 256, true);
  {
    data::ShardWriter writer(plain_dir.path() + "/a.hstok", 1, 256);  // same tokens, no mask
    for (size_t d = 0; d + 1 < content.offsets.size(); ++d)
      writer.add_document(
          std::span<const uint32_t>(content.tokens)
              .subspan(content.offsets[d], content.offsets[d + 1] - content.offsets[d]));
    writer.finish();
  }
  ScopedRing ring(model_ring_shape(true, 1));
  auto masked = make_source(*ring, masked_dir.path(), 0);
  auto plain = make_source(*ring, plain_dir.path(), 0);
  const data::Corpus corpus = data::Corpus::open(masked_dir.path());
  const data::BatchIndex index(corpus, data::PackOptions{40, 9});
  uint64_t ignored = 0;
  for (uint64_t id = 0; id < index.batches_per_epoch(); ++id) {
    const BatchPlan plan = masked->plan(id);
    const data::TokenBatch batch = data::read_batch(corpus, index, id);
    plain->produce(plan, *ring, 0);
    masked->produce(plan, *ring, 1);
    stamp_header(*ring, 1, plan);
    ASSERT_EQ(check_model_batch(*ring, 1), "") << "batch " << id;
    const int32_t* greedy = (*ring).labels(0);
    const int32_t* labels = (*ring).labels(1);
    ASSERT_GE(*std::min_element(greedy, greedy + plan.token_count), 0);  // plain: unchanged
    for (uint32_t d = 0; d < batch.num_docs(); ++d) {
      for (int32_t t = batch.doc_offsets[d]; t < batch.doc_offsets[d + 1]; ++t) {
        const bool last = t + 1 == batch.doc_offsets[d + 1];
        const bool next_masked = !last && batch.labels[size_t(t)] == kIgnoreLabel;
        ASSERT_EQ(labels[t], next_masked ? kIgnoreLabel : greedy[t]) << "row " << t;
        ignored += next_masked;
      }
    }
  }
  EXPECT_GT(ignored, 0u);
}

// Every kind of damage a torn or stale slot shows is caught by the drafter's check.
TEST(ModelBatchCheck, CatchesEachBrokenInvariant) {
  TempDir dir;
  write_byte_corpus(dir.path(), 4);
  ScopedRing ring(model_ring_shape(true, 1));
  auto source = make_source(*ring, dir.path(), 0);
  uint64_t id = 0;
  BatchPlan plan;
  do {  // a batch of at least two documents, so offsets and positions can be broken
    plan = source->plan(id++);
  } while (plan.num_docs < 2);
  Ring& r = *ring;
  const auto fresh = [&] {
    source->produce(plan, r, 0);
    stamp_header(r, 0, plan);
    ASSERT_EQ(check_model_batch(r, 0), "");
  };
  const auto expect_caught = [&](const char* what, const std::function<void()>& damage) {
    fresh();
    damage();
    EXPECT_NE(check_model_batch(r, 0), "") << what;
  };
  expect_caught("zero tokens", [&] { r.slot(0).token_count.store(0); });
  expect_caught("too many tokens", [&] { r.slot(0).token_count.store(r.shape().max_tokens + 1); });
  expect_caught("count disagrees with offsets",
                [&] { r.slot(0).token_count.store(plan.token_count - 1); });
  expect_caught("offsets not increasing", [&] { r.doc_offsets(0)[1] = 0; });
  expect_caught("position not restarting", [&] { r.positions(0)[r.doc_offsets(0)[1]] = 7; });
  expect_caught("token outside vocab", [&] { r.tokens(0)[0] = 256; });
  expect_caught("negative label", [&] { r.labels(0)[plan.token_count - 1] = -1; });
  expect_caught("label past vocab", [&] { r.labels(0)[0] = 256; });
  // A masked-out row's label is the ignore label, a value the check accepts.
  fresh();
  r.labels(0)[0] = kIgnoreLabel;
  EXPECT_EQ(check_model_batch(r, 0), "");
  expect_caught("NaN hidden state", [&] {
    const uint16_t nan = 0x7FC0;
    std::memcpy(r.layer_region(0, 2) + 2 * (plan.token_count * r.shape().hidden_size - 1), &nan, 2);
  });
  // Damage past the batch's rows is not the batch's: still fine.
  fresh();
  const uint16_t nan = 0x7FC0;
  std::memcpy(r.layer_region(0, 0) + 2 * plan.token_count * r.shape().hidden_size, &nan, 2);
  EXPECT_EQ(check_model_batch(r, 0), "");
}

}  // namespace
}  // namespace hsring
