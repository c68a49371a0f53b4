#include "target_proc/slot_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "common/error.h"
#include "model/cpu_target_model.h"
#include "model/float_convert.h"
#include "shm/ring.h"

namespace hsring {
namespace {

// A ring unique to this test process, removed before and after.
class ScopedRing {
 public:
  explicit ScopedRing(const RingShape& shape) {
    static std::atomic<int> counter{0};
    name_ = "hsring-model-test-" + std::to_string(::getpid()) + "-" +
            std::to_string(counter.fetch_add(1));
    Ring::remove(name_);
    ring_ = Ring::create(name_, shape);
  }
  ~ScopedRing() {
    ring_.reset();
    Ring::remove(name_);
  }
  const Ring& operator*() const { return *ring_; }

 private:
  std::string name_;
  std::unique_ptr<Ring> ring_;
};

RingShape tiny_ring_shape(DType dtype, bool split) {
  const ModelConfig c = named_model_config("tiny");
  RingShape s;
  s.slot_count = 4;
  s.max_tokens = 48;
  s.hidden_size = c.hidden_size;
  s.num_layers = 5;
  s.dtype = dtype;
  s.split_layers = split ? 1 : 0;
  s.num_targets = 1;
  s.num_drafters = 1;
  s.hs_min_ready = 1;
  s.ledger_capacity = 64;
  const std::vector<int32_t> ids = default_capture_layers(c.num_layers, s.num_layers);
  std::copy(ids.begin(), ids.end(), s.layer_ids);
  return s;
}

std::unique_ptr<TargetModel> tiny_model() {
  const ModelConfig c = named_model_config("tiny");
  return std::make_unique<CpuTargetModel>(c, random_weights(c, 77), CpuModelOptions{1});
}

struct Batch {
  std::vector<int32_t> tokens, positions, offsets;
  PackedBatch view() const { return {tokens, positions, offsets}; }
};

Batch two_documents() {
  Batch b;
  b.offsets = {0, 13, 30};
  for (int32_t t = 0; t < 30; ++t) {
    b.tokens.push_back((t * 53 + 11) % 256);
    b.positions.push_back(t < 13 ? t : t - 13);
  }
  return b;
}

// The element the slot holds for (layer k, token t, dim i), as float bits of its dtype.
uint32_t slot_bits(const Ring& ring, uint32_t slot, uint32_t k, uint32_t t, uint32_t i) {
  const RingShape& s = ring.shape();
  const uint32_t elem = dtype_size(s.dtype);
  const std::byte* at =
      s.split_layers
          ? ring.layer_region(slot, k) + (size_t(t) * s.hidden_size + i) * elem
          : ring.payload(slot) + ((size_t(t) * s.num_layers + k) * s.hidden_size + i) * elem;
  uint32_t bits = 0;
  std::memcpy(&bits, at, elem);
  return bits;
}

uint32_t expected_bits(float v, DType dtype) {
  if (dtype == DType::kBF16) return float_to_bf16(v);
  if (dtype == DType::kFP16) return float_to_fp16(v);
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return bits;
}

class SlotWriterTest : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

TEST_P(SlotWriterTest, WritesCapturedLayersAndLabels) {
  const auto [dtype, split] = GetParam();
  const RingShape shape = tiny_ring_shape(dtype, split);
  ScopedRing ring(shape);
  ModelSlotWriter writer(tiny_model(), (*ring).shape());
  EXPECT_EQ(writer.capture_layers(), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  const Batch b = two_documents();
  writer.produce(b.view(), *ring, 2);

  // The same forward, run directly: every element must be its round-to-nearest-even image.
  ForwardRequest request;
  request.capture_layers = writer.capture_layers();
  ForwardOutput expect;
  writer.model().forward(b.view(), request, expect);
  for (uint32_t k = 0; k < shape.num_layers; ++k)
    for (uint32_t t = 0; t < 30; ++t)
      for (uint32_t i = 0; i < shape.hidden_size; ++i)
        ASSERT_EQ(slot_bits(*ring, 2, k, t, i),
                  expected_bits(expect.captured[k][t * shape.hidden_size + i], dtype))
            << "layer " << k << " token " << t << " dim " << i;
  EXPECT_EQ(std::vector<int32_t>((*ring).tokens(2), (*ring).tokens(2) + 30), b.tokens);
  EXPECT_EQ(std::vector<int32_t>((*ring).positions(2), (*ring).positions(2) + 30), b.positions);
  EXPECT_EQ(std::vector<int32_t>((*ring).doc_offsets(2), (*ring).doc_offsets(2) + 3), b.offsets);
  EXPECT_EQ(std::vector<int32_t>((*ring).labels(2), (*ring).labels(2) + 30), expect.greedy);
  // Other slots are untouched.
  EXPECT_EQ(slot_bits(*ring, 1, 0, 0, 0), 0u);
  EXPECT_EQ(slot_bits(*ring, 3, 4, 29, 127), 0u);
}

INSTANTIATE_TEST_SUITE_P(Layouts, SlotWriterTest,
                         ::testing::Combine(::testing::Values(DType::kBF16, DType::kFP16,
                                                              DType::kFP32),
                                            ::testing::Bool()));

TEST(SlotWriterShapeTest, RejectsRingsThatDoNotFitTheModel) {
  RingShape shape = tiny_ring_shape(DType::kBF16, true);
  shape.hidden_size = 256;
  try {
    ModelSlotWriter writer(tiny_model(), shape);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kModel);
    EXPECT_NE(std::string(e.what()).find("ring hidden size 256, model hidden size 128"),
              std::string::npos);
  }
  shape = tiny_ring_shape(DType::kBF16, true);
  shape.layer_ids[3] = 6;
  EXPECT_THROW(ModelSlotWriter(tiny_model(), shape), Error);
  shape = tiny_ring_shape(DType::kBF16, true);
  std::fill(shape.layer_ids, shape.layer_ids + kMaxCapturedLayers, 0);  // left unset
  try {
    ModelSlotWriter writer(tiny_model(), shape);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("repeat layer 0"), std::string::npos) << e.what();
  }
}

TEST(SlotWriterShapeTest, RejectsBatchesLongerThanASlot) {
  const RingShape shape = tiny_ring_shape(DType::kBF16, true);
  ScopedRing ring(shape);
  ModelSlotWriter writer(tiny_model(), shape);
  Batch b;
  b.tokens.assign(49, 1);
  b.positions.resize(49);
  b.offsets = {0, 49};
  EXPECT_THROW(writer.produce(b.view(), *ring, 0), Error);
  EXPECT_THROW(writer.produce(two_documents().view(), *ring, 4), Error);  // no slot 4
  ScopedRing other(tiny_ring_shape(DType::kFP32, true));
  EXPECT_THROW(writer.produce(two_documents().view(), *other, 0), Error);
  EXPECT_NO_THROW(writer.produce(two_documents().view(), *ring, 3));
}

TEST(ConvertRowsTest, HonoursThePitch) {
  const std::vector<float> src = {1.0f, 2.0f, 3.0f, 4.0f};
  std::vector<uint16_t> dst(8, 0xFFFF);
  convert_rows(src.data(), 2, 2, DType::kBF16, reinterpret_cast<std::byte*>(dst.data()), 8);
  EXPECT_EQ(
      dst, (std::vector<uint16_t>{0x3F80, 0x4000, 0xFFFF, 0xFFFF, 0x4040, 0x4080, 0xFFFF, 0xFFFF}));
}

}  // namespace
}  // namespace hsring
