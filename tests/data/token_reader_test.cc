// The io_uring reader: batch content matches the corpus, is a pure function of the batch
// id (whatever the depth, id order or consumer speed), and read-ahead really reads ahead.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "common/error.h"
#include "data/token_reader.h"
#include "test_corpus.h"

namespace hsring::data {
namespace {

using testing::TempDir;

class TokenReaderTest : public ::testing::Test {
 protected:
  void SetUp() override { write_corpus(false); }
  void write_corpus(bool masked) {
    std::mt19937_64 rng(31);
    content_ = testing::write_random_corpus(dir_.path(), rng, 5, 40, 700, masked);
    corpus_ = std::make_unique<Corpus>(Corpus::open(dir_.path()));
    index_ = std::make_unique<BatchIndex>(*corpus_, PackOptions{256, 9, 128});
  }

  // Checks a batch against the shard contents the test wrote.
  void expect_consistent(const TokenBatch& batch) {
    const BatchRef ref = index_->batch(batch.batch_id);
    ASSERT_EQ(batch.token_count(), ref.token_count);
    ASSERT_EQ(batch.num_docs(), ref.pieces.size());
    ASSERT_EQ(batch.length_bucket, ref.length_bucket);
    ASSERT_EQ(batch.doc_offsets.front(), 0);
    ASSERT_EQ(batch.doc_offsets.back(), int32_t(batch.token_count()));
    for (size_t d = 0; d < ref.pieces.size(); ++d) {
      const Piece& p = ref.pieces[d];
      const int32_t begin = batch.doc_offsets[d], end = batch.doc_offsets[d + 1];
      ASSERT_EQ(uint32_t(end - begin), p.length);
      for (int32_t t = begin; t < end; ++t) {
        ASSERT_EQ(uint32_t(batch.tokens[t]), content_[p.shard].tokens[p.begin + (t - begin)]);
        ASSERT_EQ(batch.positions[t], t - begin);
        // A row counts when its next token is in the piece and the loss mask counts it.
        const bool counts = t + 1 < end && content_[p.shard].counted[p.begin + (t + 1 - begin)];
        ASSERT_EQ(batch.labels[t], counts ? batch.tokens[t + 1] : kIgnoreLabel);
      }
    }
  }

  std::vector<TokenBatch> read_all(BatchIdSource ids, ReaderOptions options) {
    TokenReader reader(*corpus_, *index_, std::move(ids), options);
    std::vector<TokenBatch> out;
    while (std::optional<TokenBatch> b = reader.next()) out.push_back(std::move(*b));
    return out;
  }

  TempDir dir_;
  std::vector<testing::ShardContent> content_;
  std::unique_ptr<Corpus> corpus_;
  std::unique_ptr<BatchIndex> index_;
};

TEST_F(TokenReaderTest, OnePassYieldsEveryTokenOnceWithConsistentArrays) {
  const uint64_t n = index_->batches_per_epoch();
  const auto batches = read_all(strided_ids(0, 1, n), ReaderOptions{4, 16});
  ASSERT_EQ(batches.size(), n);
  uint64_t tokens = 0;
  std::map<int32_t, uint64_t> histogram, expected;
  for (const TokenBatch& b : batches) {
    expect_consistent(b);
    tokens += b.token_count();
    for (int32_t t : b.tokens) ++histogram[t];
  }
  for (const auto& shard : content_)
    for (uint32_t t : shard.tokens) ++expected[int32_t(t)];
  EXPECT_EQ(tokens, corpus_->token_count());
  EXPECT_EQ(histogram, expected);
}

TEST_F(TokenReaderTest, BatchContentIsAPureFunctionOfTheId) {
  const uint64_t n = index_->batches_per_epoch();
  // Reader A: ids in order across two epochs, depth 1. Reader B: the same ids shuffled,
  // depth 8, tiny queue. Reference: blocking pread, one id at a time.
  std::vector<uint64_t> ids(2 * n + 3);
  std::iota(ids.begin(), ids.end(), 0);
  const auto a = read_all(strided_ids(0, 1, ids.size()), ReaderOptions{1, 1});
  std::mt19937_64 rng(32);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t at = 0;
  const auto b = read_all(
      [&]() -> std::optional<uint64_t> {
        if (at == ids.size()) return std::nullopt;
        return ids[at++];
      },
      ReaderOptions{8, 3});
  ASSERT_EQ(a.size(), b.size());
  for (const TokenBatch& batch : b) {
    ASSERT_EQ(batch, a[batch.batch_id]) << "batch " << batch.batch_id;
    ASSERT_EQ(batch, read_batch(*corpus_, *index_, batch.batch_id));
  }
  // A restarted target (a fresh corpus and index from the same files) agrees too.
  const Corpus corpus = Corpus::open(dir_.path());
  const BatchIndex index(corpus, index_->options());
  for (uint64_t id : {uint64_t{0}, uint64_t{5}, n, 2 * n + 2})
    EXPECT_EQ(read_batch(corpus, index, id), a[id]);
}

TEST_F(TokenReaderTest, StridedTargetsSplitTheIdsBetweenThem) {
  // Target t of 3 reads ids t, t+3, ...; together they read each id of the range once.
  std::map<uint64_t, TokenBatch> seen;
  for (uint64_t t = 0; t < 3; ++t)
    for (TokenBatch& b : read_all(strided_ids(t, 3, 10), ReaderOptions{})) {
      ASSERT_EQ(b.batch_id % 3, t);
      ASSERT_TRUE(seen.emplace(b.batch_id, std::move(b)).second);
    }
  EXPECT_EQ(seen.size(), 30u);
}

TEST_F(TokenReaderTest, ReadsAheadOfASlowConsumer) {
  const uint32_t depth = 4;
  const uint64_t count = 12;
  TokenReader reader(*corpus_, *index_, strided_ids(0, 1, count), ReaderOptions{depth, 8});
  std::vector<TokenBatch> slow;
  while (std::optional<TokenBatch> b = reader.next()) {
    slow.push_back(std::move(*b));
    std::this_thread::sleep_for(std::chrono::milliseconds(15));  // the "forward pass"
  }
  EXPECT_EQ(reader.stats().batches, count);
  EXPECT_EQ(reader.stats().max_ahead, depth);
  // While the consumer slept, the next batch's reads finished: after the first batch
  // (which nobody could have read ahead), next() never waits.
  EXPECT_GE(reader.stats().ready_on_arrival, count - 1);
  const auto fast = read_all(strided_ids(0, 1, count), ReaderOptions{1, 1});
  EXPECT_EQ(slow, fast);
}

TEST_F(TokenReaderTest, FileTruncatedAfterOpenIsAnErrorNamingIt) {
  // The corpus was checked at open; the reader still refuses a file that shrank later.
  const std::string victim = corpus_->shards()[1].path;
  std::filesystem::resize_file(victim, corpus_->shards()[1].header.tokens_offset() + 3);
  TokenReader reader(*corpus_, *index_, strided_ids(0, 1, index_->batches_per_epoch()),
                     ReaderOptions{2, 4});
  try {
    while (reader.next()) {
    }
    FAIL() << "reading a truncated shard succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kData);
    EXPECT_EQ(e.path(), victim);
    EXPECT_NE(std::string(e.what()).find(victim + ": byte "), std::string::npos) << e.what();
  }
}

TEST_F(TokenReaderTest, CorpusWithoutTokenVerificationStillRangeChecksTokens) {
  // Overwrite a token of the uint16 shard with a value past its 50000 vocabulary but keep
  // the file size: the corpus opens (no token pass), the batch holding it throws.
  const ShardInfo& shard = corpus_->shards()[1];
  ASSERT_EQ(shard.header.token_bytes, 2u);
  {
    std::fstream f(shard.path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(shard.header.tokens_offset()));
    const uint16_t bad = 65000;
    f.write(reinterpret_cast<const char*>(&bad), 2);
  }
  CorpusOptions options;
  options.verify_tokens = false;
  const Corpus corpus = Corpus::open(dir_.path(), options);
  EXPECT_THROW(Corpus::open(dir_.path()), Error);  // the verifying open sees it
  const BatchIndex index(corpus, index_->options());
  bool thrown = false;
  try {
    for (uint64_t id = 0; id < index.batches_per_epoch(); ++id) read_batch(corpus, index, id);
  } catch (const Error& e) {
    thrown = true;
    EXPECT_EQ(e.code(), Errc::kData);
    EXPECT_EQ(e.path(), shard.path);
    EXPECT_EQ(e.offset(), shard.header.tokens_offset());
  }
  EXPECT_TRUE(thrown);
}

// The same corpus with a loss mask in every shard: its bits reach the labels through
// io_uring exactly as through pread, and the mask's reads are counted.
class MaskedTokenReaderTest : public TokenReaderTest {
 protected:
  void SetUp() override { write_corpus(true); }
};

TEST_F(MaskedTokenReaderTest, LabelsFollowTheMaskOnEveryPath) {
  for (const ShardInfo& shard : corpus_->shards()) ASSERT_TRUE(shard.header.has_mask());
  const uint64_t n = index_->batches_per_epoch();
  TokenReader reader(*corpus_, *index_, strided_ids(0, 1, n), ReaderOptions{3, 5});
  uint64_t pieces = 0, ignored = 0, rows = 0;
  while (std::optional<TokenBatch> b = reader.next()) {
    expect_consistent(*b);
    ASSERT_EQ(*b, read_batch(*corpus_, *index_, b->batch_id));
    pieces += b->num_docs();
    rows += b->token_count();
    for (int32_t label : b->labels) ignored += label == kIgnoreLabel;
  }
  EXPECT_EQ(reader.stats().reads, 2 * pieces);  // tokens and mask bytes of each piece
  EXPECT_GT(ignored, pieces + rows / 10);       // the mask ignored many rows, not just ends
}

TEST(MaskTargetLabelsTest, IgnoresRowsBeforeAMaskedTokenOnly) {
  TokenBatch batch;
  batch.tokens = {5, 6, 7, 8, 9, 10};
  batch.doc_offsets = {0, 4, 6};
  // Sequence 0: row 1's next token (7) is masked out; row 3 ends the sequence.
  batch.labels = {6, kIgnoreLabel, 8, kIgnoreLabel, 10, kIgnoreLabel};
  std::vector<int32_t> greedy = {1, 2, 3, 4, 5, 6};
  mask_target_labels(batch, greedy.data());
  EXPECT_EQ(greedy, (std::vector<int32_t>{1, kIgnoreLabel, 3, 4, 5, 6}));
}

TEST(TokenReaderOptionsTest, ZeroDepthIsRefused) {
  TempDir dir;
  std::mt19937_64 rng(33);
  testing::write_random_corpus(dir.path(), rng, 1, 5, 20);
  const Corpus corpus = Corpus::open(dir.path());
  const BatchIndex index(corpus, PackOptions{});
  EXPECT_THROW(TokenReader(corpus, index, strided_ids(0, 1), ReaderOptions{0, 4}), Error);
}

}  // namespace
}  // namespace hsring::data
