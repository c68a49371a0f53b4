// The C API as a foreign caller sees it: errors as codes and messages (attach refusals,
// calls out of order, wrong sizes), a produce/consume round trip that hsring's own
// synthetic verifier checks, and epoch recovery: a producer process SIGKILLed with a job
// bound, whose successor re-produces that very batch into the same slot.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "hsring/hsring.h"
#include "shm/ledger.h"
#include "shm/ring.h"
#include "tests/shm/ring_test_util.h"
#include "worker/synthetic_batch.h"

namespace hsring {
namespace {

using test::ScopedRingName;

RingShape small_shape() {
  RingShape s = test::tiny_shape();
  s.num_targets = 1;
  s.num_drafters = 1;
  s.batch_limit = 0;
  return s;
}

// Layer k of batch `id` as the synthetic verifier expects it: [T, H] of bf16 bits.
std::vector<uint16_t> synthetic_layer(const RingShape& s, uint64_t id, uint32_t k,
                                      uint32_t tokens) {
  std::vector<uint16_t> rows(size_t(tokens) * s.hidden_size);
  for (uint32_t t = 0; t < tokens; ++t)
    for (uint32_t d = 0; d < s.hidden_size; ++d)
      rows[size_t(t) * s.hidden_size + d] = uint16_t(synthetic_element_bits(id, k, t, d, 2));
  return rows;
}

hs_status write_synthetic(hs_producer* p, const RingShape& s, const hs_job& job) {
  for (uint32_t k = 0; k < s.num_layers; ++k) {
    const std::vector<uint16_t> rows = synthetic_layer(s, job.batch_id, k, job.token_count);
    if (hs_status st = hs_job_write_layer(p, job.ticket, k, rows.data(), 0); st != HS_OK) return st;
  }
  return HS_OK;
}

hs_job take_job(hs_producer* p) {
  hs_job job{};
  EXPECT_EQ(hs_producer_next_job(p, 1000, &job), HS_OK) << hs_last_error();
  return job;
}

TEST(CapiTest, AttachRefusalsAreCodesWithMessages) {
  ScopedRingName name("capi-attach");
  hs_producer* p = nullptr;
  EXPECT_EQ(hs_producer_open(name.str().c_str(), 0, nullptr, &p), HS_ERR_NOT_FOUND);
  EXPECT_NE(std::string(hs_last_error()).find(name.str()), std::string::npos) << hs_last_error();
  EXPECT_EQ(p, nullptr);

  auto ring = Ring::create(name.str(), small_shape());
  EXPECT_EQ(hs_producer_open(name.str().c_str(), 1, nullptr, &p), HS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hs_last_error()).find("does not exist"), std::string::npos);
  EXPECT_EQ(hs_producer_open(nullptr, 0, nullptr, &p), HS_ERR_INVALID_ARGUMENT);

  ASSERT_EQ(hs_producer_open(name.str().c_str(), 0, nullptr, &p), HS_OK) << hs_last_error();
  hs_producer* second = nullptr;
  hs_producer_options quick{};
  quick.lock_wait_ms = 20;
  EXPECT_EQ(hs_producer_open(name.str().c_str(), 0, &quick, &second), HS_ERR_BUSY);
  EXPECT_NE(std::string(hs_last_error()).find("already running"), std::string::npos);
  EXPECT_EQ(hs_producer_close(p), HS_OK);

  // The launcher names the epoch a start must open; any other is refused.
  hs_producer_options stale{};
  stale.expected_epoch = 7;
  EXPECT_EQ(hs_producer_open(name.str().c_str(), 0, &stale, &p), HS_ERR_BUSY);
  EXPECT_NE(std::string(hs_last_error()).find("HSRING_EPOCH"), std::string::npos);

  hs_ring_shape shape{};
  ASSERT_EQ(hs_ring_shape_of(name.str().c_str(), &shape), HS_OK);
  EXPECT_EQ(shape.hidden_size, small_shape().hidden_size);
  EXPECT_EQ(shape.dtype, uint32_t(HS_DTYPE_BF16));
  EXPECT_EQ(shape.dtype_size, 2u);
}

TEST(CapiTest, RoundTripIsVerifiedByTheSyntheticChecker) {
  ScopedRingName name("capi-roundtrip");
  const RingShape s = small_shape();
  auto ring = Ring::create(name.str(), s);
  hs_producer* p = nullptr;
  hs_consumer* c = nullptr;
  ASSERT_EQ(hs_producer_open(name.str().c_str(), 0, nullptr, &p), HS_OK) << hs_last_error();
  ASSERT_EQ(hs_consumer_open(name.str().c_str(), 0, nullptr, &c), HS_OK) << hs_last_error();

  for (uint64_t expected = 0; expected < 5; ++expected) {
    const hs_job job = take_job(p);
    EXPECT_EQ(job.batch_id, expected);  // the shard in order
    EXPECT_EQ(job.reproduced, 0u);
    ASSERT_EQ(write_synthetic(p, s, job), HS_OK) << hs_last_error();
    ASSERT_EQ(hs_job_publish(p, job.ticket), HS_OK) << hs_last_error();

    hs_batch batch{};
    ASSERT_EQ(hs_consumer_next(c, 1000, &batch), HS_OK) << hs_last_error();
    EXPECT_EQ(batch.batch_id, expected);
    EXPECT_EQ(verify_synthetic_batch(*ring, batch.slot), "");
    EXPECT_EQ(batch.token_count, job.token_count);
    // The consumer's own mapping: the same layout at another address.
    EXPECT_EQ(static_cast<const std::byte*>(batch.layers[1]) -
                  static_cast<const std::byte*>(batch.layers[0]),
              ring->layer_region(batch.slot, 1) - ring->layer_region(batch.slot, 0));
    EXPECT_EQ(batch.layer_row_pitch, uint64_t(s.hidden_size) * 2);
    ASSERT_EQ(hs_consumer_release(c, batch.ticket), HS_OK) << hs_last_error();
    EXPECT_EQ(hs_consumer_release(c, batch.ticket), HS_ERR_STATE);  // a double release
    EXPECT_NE(std::string(hs_last_error()).find("released already"), std::string::npos);
  }
  EXPECT_EQ(ledger_count_consumed(*ring, 5), 5u);
  // Counted where `hsring status` reads them.
  EXPECT_EQ(ring->process(0).batches.load(), 5u);
  EXPECT_EQ(ring->process(1).batches.load(), 5u);
  EXPECT_EQ(ring->process(0).stages[uint32_t(Stage::kTargetForward)].count.load(), 5u);
  EXPECT_EQ(ring->process(1).stages[uint32_t(Stage::kDrafterStep)].count.load(), 5u);
  EXPECT_EQ(hs_consumer_close(c), HS_OK);
  EXPECT_EQ(hs_producer_close(p), HS_OK);
}

// What python/hsring maps so that its views outlive the handle: the handle's own segment
// (the same bytes at the same offsets), read-only, and not the handle's liveness lock: once
// the handle is closed, its index opens again while the caller's mapping lives on.
TEST(CapiTest, TheSegmentIsTheHandlesOwnAndOutlivesItWithoutItsLock) {
  ScopedRingName name("capi-segment");
  const RingShape s = small_shape();
  auto ring = Ring::create(name.str(), s);
  hs_producer* p = nullptr;
  ASSERT_EQ(hs_producer_open(name.str().c_str(), 0, nullptr, &p), HS_OK) << hs_last_error();
  const void* base = nullptr;
  uint64_t size = 0;
  int fd = -1;
  ASSERT_EQ(hs_producer_segment(p, &base, &size, &fd), HS_OK) << hs_last_error();
  EXPECT_EQ(size, ring->size());
  ASSERT_GE(fd, 0);
  void* mine = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(mine, MAP_FAILED);
  EXPECT_EQ(hs_producer_segment(p, &base, &size, nullptr), HS_ERR_INVALID_ARGUMENT);

  const hs_job job = take_job(p);
  const size_t offset =
      size_t(reinterpret_cast<const std::byte*>(job.tokens) - static_cast<const std::byte*>(base));
  ASSERT_LT(offset, size);
  const auto* tokens = reinterpret_cast<const int32_t*>(static_cast<std::byte*>(mine) + offset);
  EXPECT_EQ(std::memcmp(tokens, job.tokens, job.token_count * sizeof(int32_t)), 0);
  EXPECT_EQ(std::memcmp(tokens, ring->tokens(job.slot), job.token_count * sizeof(int32_t)), 0);
  EXPECT_EQ(hs_producer_close(p), HS_OK);

  hs_producer_options quick{};
  quick.lock_wait_ms = 1;
  ASSERT_EQ(hs_producer_open(name.str().c_str(), 0, &quick, &p), HS_OK) << hs_last_error();
  EXPECT_EQ(hs_producer_close(p), HS_OK);
  hs_consumer* c = nullptr;
  ASSERT_EQ(hs_consumer_open(name.str().c_str(), 0, nullptr, &c), HS_OK) << hs_last_error();
  ASSERT_EQ(hs_consumer_segment(c, &base, &size, &fd), HS_OK) << hs_last_error();
  ::close(fd);
  EXPECT_EQ(hs_consumer_close(c), HS_OK);
  ::munmap(mine, size);
}

TEST(CapiTest, CallsOutOfOrderAndWrongSizesAreRefused) {
  ScopedRingName name("capi-order");
  const RingShape s = small_shape();
  auto ring = Ring::create(name.str(), s);
  hs_producer* p = nullptr;
  ASSERT_EQ(hs_producer_open(name.str().c_str(), 0, nullptr, &p), HS_OK) << hs_last_error();
  EXPECT_EQ(hs_job_publish(p, 12345), HS_ERR_STATE);  // no such job
  const hs_job job = take_job(p);
  EXPECT_EQ(hs_job_publish(p, job.ticket), HS_ERR_STATE);  // nothing written
  EXPECT_NE(std::string(hs_last_error()).find("layer 0"), std::string::npos) << hs_last_error();
  const std::vector<uint16_t> rows = synthetic_layer(s, job.batch_id, 0, job.token_count);
  EXPECT_EQ(hs_job_write_layer(p, job.ticket, s.num_layers, rows.data(), 0),
            HS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hs_job_write_layer(p, job.ticket, 0, rows.data(), 1), HS_ERR_SHAPE);  // pitch < row
  std::vector<int32_t> labels(job.token_count + 1, 0);
  EXPECT_EQ(hs_job_write_labels(p, job.ticket, labels.data(), job.token_count + 1), HS_ERR_SHAPE);
  EXPECT_EQ(hs_job_set_tokens(p, job.ticket, labels.data(), labels.data(), 1, labels.data(), 1),
            HS_ERR_STATE);  // this producer's tokens are the ring's
  EXPECT_EQ(hs_job_copy_layer_device(p, job.ticket, 0, rows.data(), 0, nullptr),
            hs_has_cuda() ? HS_ERR_CUDA : HS_ERR_UNSUPPORTED);
  ASSERT_EQ(write_synthetic(p, s, job), HS_OK);
  ASSERT_EQ(hs_job_publish(p, job.ticket), HS_OK) << hs_last_error();
  EXPECT_EQ(hs_job_publish(p, job.ticket), HS_ERR_STATE);  // published already
  EXPECT_EQ(hs_producer_close(p), HS_OK);
}

// hs_job_write_layers: every layer in one call, checked before any is written, and one
// target.copy sample per call (as the GPU target times its whole copy).
TEST(CapiTest, WriteLayersWritesAllOrNothingInOneCall) {
  ScopedRingName name("capi-layers");
  const RingShape s = small_shape();
  ASSERT_GE(s.num_layers, 2u);
  auto ring = Ring::create(name.str(), s);
  hs_producer* p = nullptr;
  hs_consumer* c = nullptr;
  ASSERT_EQ(hs_producer_open(name.str().c_str(), 0, nullptr, &p), HS_OK) << hs_last_error();
  ASSERT_EQ(hs_consumer_open(name.str().c_str(), 0, nullptr, &c), HS_OK) << hs_last_error();
  const hs_job job = take_job(p);
  std::vector<std::vector<uint16_t>> layers;
  std::vector<const void*> sources;
  for (uint32_t k = 0; k < s.num_layers; ++k) {
    layers.push_back(synthetic_layer(s, job.batch_id, k, job.token_count));
    sources.push_back(layers.back().data());
  }
  std::vector<uint64_t> pitches(s.num_layers, 0);
  pitches.back() = 1;  // below a row: the last layer is refused, so nothing is written
  EXPECT_EQ(hs_job_write_layers(p, job.ticket, 0, s.num_layers, sources.data(), pitches.data()),
            HS_ERR_SHAPE);
  EXPECT_NE(std::string(hs_last_error()).find("layer " + std::to_string(s.num_layers - 1)),
            std::string::npos)
      << hs_last_error();
  EXPECT_EQ(hs_job_publish(p, job.ticket), HS_ERR_STATE);
  EXPECT_NE(std::string(hs_last_error()).find("layer 0 of batch"), std::string::npos)
      << hs_last_error();
  EXPECT_EQ(hs_job_write_layers(p, job.ticket, 1, s.num_layers, sources.data(), nullptr),
            HS_ERR_INVALID_ARGUMENT);  // past the last layer
  EXPECT_EQ(hs_job_write_layers(p, job.ticket, 0, 0, sources.data(), nullptr),
            HS_ERR_INVALID_ARGUMENT);
  const uint64_t copies_before = ring->process(0).stages[uint32_t(Stage::kTargetCopy)].count.load();
  // Layer 0 alone, then the rest in one call with dense pitches (NULL).
  ASSERT_EQ(hs_job_write_layers(p, job.ticket, 0, 1, sources.data(), nullptr), HS_OK)
      << hs_last_error();
  ASSERT_EQ(hs_job_write_layers(p, job.ticket, 1, s.num_layers - 1, sources.data() + 1, nullptr),
            HS_OK)
      << hs_last_error();
  EXPECT_EQ(ring->process(0).stages[uint32_t(Stage::kTargetCopy)].count.load() - copies_before, 2u);
  ASSERT_EQ(hs_job_publish(p, job.ticket), HS_OK) << hs_last_error();
  hs_batch batch{};
  ASSERT_EQ(hs_consumer_next(c, 1000, &batch), HS_OK) << hs_last_error();
  EXPECT_EQ(verify_synthetic_batch(*ring, batch.slot), "");
  ASSERT_EQ(hs_consumer_release(c, batch.ticket), HS_OK);
  EXPECT_EQ(job.loss_mask, nullptr) << "synthetic tokens carry no loss mask";
  EXPECT_EQ(hs_consumer_close(c), HS_OK);
  EXPECT_EQ(hs_producer_close(p), HS_OK);
}

TEST(CapiTest, CallerTokensSetTheBatchAndAreChecked) {
  ScopedRingName name("capi-caller");
  RingShape s = small_shape();
  s.content = PayloadContent::kModel;
  s.vocab_size = 100;
  auto ring = Ring::create(name.str(), s);
  hs_producer_options options{};
  options.tokens_from = HS_TOKENS_CALLER;
  hs_producer* p = nullptr;
  ASSERT_EQ(hs_producer_open(name.str().c_str(), 0, &options, &p), HS_OK) << hs_last_error();
  const hs_job job = take_job(p);
  const std::vector<int32_t> tokens = {5, 6, 7, 8, 9}, positions = {0, 1, 2, 0, 1},
                             offsets = {0, 3, 5}, bad = {5, 6, 700, 8, 9};
  EXPECT_EQ(hs_job_set_tokens(p, job.ticket, bad.data(), positions.data(), 5, offsets.data(), 2),
            HS_ERR_SHAPE);
  EXPECT_NE(std::string(hs_last_error()).find("vocabulary"), std::string::npos);
  ASSERT_EQ(hs_job_set_tokens(p, job.ticket, tokens.data(), positions.data(), 5, offsets.data(), 2),
            HS_OK)
      << hs_last_error();
  for (uint32_t k = 0; k < s.num_layers; ++k) {
    const std::vector<uint16_t> rows(5 * s.hidden_size, 0x3f80);  // 1.0 in bf16
    ASSERT_EQ(hs_job_write_layer(p, job.ticket, k, rows.data(), 0), HS_OK);
  }
  EXPECT_EQ(hs_job_publish(p, job.ticket), HS_ERR_STATE);  // a model ring needs labels
  EXPECT_NE(std::string(hs_last_error()).find("labels"), std::string::npos);
  EXPECT_EQ(job.loss_mask, nullptr) << "the caller's tokens: no mask known";
  const std::vector<int32_t> below = {5, -1, 7, 8, 9}, ignored = {5, -100, 7, 8, -100};
  EXPECT_EQ(hs_job_write_labels(p, job.ticket, below.data(), 5), HS_ERR_SHAPE);
  EXPECT_NE(std::string(hs_last_error()).find("not -100"), std::string::npos) << hs_last_error();
  ASSERT_EQ(hs_job_write_labels(p, job.ticket, ignored.data(), 5), HS_OK) << hs_last_error();
  ASSERT_EQ(hs_job_publish(p, job.ticket), HS_OK) << hs_last_error();
  EXPECT_EQ(std::vector<int32_t>(ring->labels(job.slot), ring->labels(job.slot) + 5), ignored);
  EXPECT_EQ(ring->slot(job.slot).num_docs.load(), 2u);
  EXPECT_EQ(ring->slot(job.slot).token_count.load(), 5u);
  EXPECT_EQ(hs_producer_close(p), HS_OK);
}

// The successor of a producer killed with a batch bound gets that batch first, in the same
// slot, and consumers see it once.
TEST(CapiTest, ProducerKilledWithABoundJobIsReproducedBySuccessor) {
  ScopedRingName name("capi-kill");
  const RingShape s = small_shape();
  auto ring = Ring::create(name.str(), s);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    hs_producer* p = nullptr;
    if (hs_producer_open(name.str().c_str(), 0, nullptr, &p) != HS_OK) ::_exit(2);
    hs_job job{};
    for (int i = 0; i < 2; ++i) {  // batch 0 published, batch 1 half written
      if (hs_producer_next_job(p, 1000, &job) != HS_OK) ::_exit(3);
      const std::vector<uint16_t> rows = synthetic_layer(s, job.batch_id, 0, job.token_count);
      if (hs_job_write_layer(p, job.ticket, 0, rows.data(), 0) != HS_OK) ::_exit(4);
      if (i == 0 && (write_synthetic(p, s, job) != HS_OK || hs_job_publish(p, job.ticket) != HS_OK))
        ::_exit(5);
    }
    const uint32_t slot = job.slot;
    if (::write(ready[1], &slot, sizeof slot) != sizeof slot) ::_exit(6);
    ::pause();
    ::_exit(7);
  }
  uint32_t bound_slot = 0;
  ASSERT_EQ(::read(ready[0], &bound_slot, sizeof bound_slot), ssize_t(sizeof bound_slot));
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));

  hs_producer* p = nullptr;
  ASSERT_EQ(hs_producer_open(name.str().c_str(), 0, nullptr, &p), HS_OK) << hs_last_error();
  EXPECT_EQ(hs_producer_epoch(p), 2u);
  hs_job job = take_job(p);
  EXPECT_EQ(job.batch_id, 1u);
  EXPECT_EQ(job.reproduced, 1u);
  EXPECT_EQ(job.slot, bound_slot);
  ASSERT_EQ(write_synthetic(p, s, job), HS_OK);
  ASSERT_EQ(hs_job_publish(p, job.ticket), HS_OK) << hs_last_error();
  job = take_job(p);
  EXPECT_EQ(job.batch_id, 2u);  // then the shard goes on
  EXPECT_EQ(job.reproduced, 0u);

  hs_consumer* c = nullptr;
  ASSERT_EQ(hs_consumer_open(name.str().c_str(), 0, nullptr, &c), HS_OK) << hs_last_error();
  std::vector<uint64_t> seen;
  for (int i = 0; i < 2; ++i) {
    hs_batch batch{};
    ASSERT_EQ(hs_consumer_next(c, 1000, &batch), HS_OK) << hs_last_error();
    EXPECT_EQ(verify_synthetic_batch(*ring, batch.slot), "");
    seen.push_back(batch.batch_id);
    ASSERT_EQ(hs_consumer_release(c, batch.ticket), HS_OK);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(ring->ledger_entry(1)->duplicates.load(), 0u);
  EXPECT_EQ(hs_consumer_close(c), HS_OK);
  EXPECT_EQ(hs_producer_close(p), HS_OK);
}

}  // namespace
}  // namespace hsring
