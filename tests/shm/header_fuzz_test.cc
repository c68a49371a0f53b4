// Property and fuzz tests of segment headers, which hsring reads from outside
// (validate_segment). Fixed seeds, so a failure reproduces; the ASan/UBSan build turns any
// out-of-bounds read into a failure too.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>

#include "common/error.h"
#include "shm/ring.h"
#include "tests/shm/ring_test_util.h"

namespace hsring {
namespace {

constexpr size_t kHeaderBytes = sizeof(RingHeader);
const std::string kName = "fuzzed";

// What validate_segment must conclude about a buffer; kPass only for a consistent header.
enum class Verdict { kPass, kBadMagic, kBadVersion, kBadLayout, kTruncated };

const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::kPass:
      return "pass";
    case Verdict::kBadMagic:
      return "bad-magic";
    case Verdict::kBadVersion:
      return "bad-version";
    case Verdict::kBadLayout:
      return "bad-layout";
    case Verdict::kTruncated:
      return "truncated";
  }
  return "?";
}
void PrintTo(Verdict v, std::ostream* os) { *os << to_string(v); }  // for gtest messages

// The shape limits of ring_layout.h restated in 64-bit arithmetic, independently of
// validate_shape: sums of 32-bit fields must not wrap into range.
bool shape_within_limits(const RingShape& s) {
  const uint64_t workers = uint64_t(s.num_targets) + s.num_drafters;
  return s.slot_count >= 2 && s.slot_count <= kMaxSlots && s.max_tokens >= 1 &&
         s.max_tokens <= (1u << 20) && s.hidden_size >= 1 && s.hidden_size <= (1u << 16) &&
         s.num_layers >= 1 && s.num_layers <= kMaxCapturedLayers &&
         (s.dtype == DType::kBF16 || s.dtype == DType::kFP16 || s.dtype == DType::kFP32) &&
         s.split_layers <= 1 &&
         (s.content == PayloadContent::kSynthetic ||
          (s.content == PayloadContent::kModel && s.vocab_size >= 1)) &&
         s.num_targets >= 1 && s.data_offset % s.num_targets == 0 && s.num_drafters >= 1 &&
         workers <= kMaxProcesses && s.hs_min_ready >= 1 &&
         uint64_t(s.hs_min_ready) + s.num_targets <= s.slot_count && s.ledger_capacity >= 1 &&
         s.ledger_capacity <= (1ull << 28) && s.batch_limit <= s.ledger_capacity &&
         s.ordered_claims <= 1 && (s.ordered_claims == 0 || s.batch_limit > 0);
}

// A header as plain bytes, aligned so it can be viewed as a RingHeader.
struct HeaderBytes {
  alignas(RingHeader) std::array<std::byte, kHeaderBytes> bytes;
  RingHeader& header() { return *reinterpret_cast<RingHeader*>(bytes.data()); }
  const RingHeader& header() const { return *reinterpret_cast<const RingHeader*>(bytes.data()); }
};

HeaderBytes header_of(const std::byte* buffer) {
  HeaderBytes h;
  std::memcpy(h.bytes.data(), buffer, kHeaderBytes);
  return h;
}

Verdict expected_verdict(const std::byte* buffer, size_t size) {
  if (size < kHeaderBytes) return Verdict::kTruncated;
  const HeaderBytes copy = header_of(buffer);
  const RingHeader& h = copy.header();
  uint64_t magic;
  std::memcpy(&magic, copy.bytes.data(), sizeof magic);
  if (magic != kRingMagic) return Verdict::kBadMagic;
  if (h.version != kRingVersion) return Verdict::kBadVersion;
  if (h.header_size != kHeaderBytes || !shape_within_limits(h.shape)) return Verdict::kBadLayout;
  const RingLayout expected = compute_layout(h.shape);
  if (std::memcmp(&expected, &h.layout, sizeof expected) != 0) return Verdict::kBadLayout;
  return h.layout.total_size > size ? Verdict::kTruncated : Verdict::kPass;
}

Verdict actual_verdict(const std::byte* buffer, size_t size) {
  try {
    validate_segment(buffer, size, kName);
    return Verdict::kPass;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'" + kName + "'"), std::string::npos) << e.what();
    // One code (ring) for every refusal: the message says which check refused it.
    EXPECT_EQ(e.code(), Errc::kRing) << e.what();
    const std::string what = e.what();
    if (what.find("wrong magic") != std::string::npos) return Verdict::kBadMagic;
    if (what.find("protocol version") != std::string::npos) return Verdict::kBadVersion;
    if (what.find("is truncated") != std::string::npos) return Verdict::kTruncated;
    if (what.find("header of") != std::string::npos || what.find("shape") != std::string::npos)
      return Verdict::kBadLayout;
    ADD_FAILURE() << "unexpected refusal: " << what;
  }
  return Verdict::kPass;
}

// What a passing header promises its users: every region the ring hands out lies inside
// the segment. Computed in 128 bits so the check itself cannot wrap.
void expect_regions_inside(const RingHeader& h, size_t size) {
  __extension__ typedef unsigned __int128 u128;  // -Wpedantic: a GCC/Clang extension
  const RingShape& s = h.shape;
  const RingLayout& l = h.layout;
  const u128 procs = u128(s.num_targets) + s.num_drafters;
  EXPECT_LE(u128(l.process_table_offset) + procs * sizeof(ProcessEntry), l.target_progress_offset);
  EXPECT_LE(u128(l.target_progress_offset) + u128(s.num_targets) * sizeof(TargetProgress),
            l.ledger_offset);
  EXPECT_LE(u128(l.ledger_offset) + u128(s.ledger_capacity) * sizeof(LedgerEntry),
            l.slot_headers_offset);
  EXPECT_LE(u128(l.slot_headers_offset) + u128(s.slot_count) * sizeof(SlotHeader),
            l.payload_offset);
  EXPECT_LE(u128(l.payload_offset) + u128(l.slot.stride) * s.slot_count, size);
  EXPECT_GE(l.process_table_offset, kHeaderBytes);
  const u128 hs_bytes = u128(s.max_tokens) * s.hidden_size * dtype_size(s.dtype);
  const uint32_t regions = s.split_layers ? s.num_layers : 1;
  for (uint32_t k = 0; k < regions; ++k) {
    EXPECT_LE(u128(l.slot.layer_offset[k]) + hs_bytes * (s.split_layers ? 1 : s.num_layers),
              l.slot.stride);
  }
  EXPECT_LE(u128(l.slot.labels_offset) + u128(s.max_tokens) * 4, l.slot.stride);
  EXPECT_LE(u128(l.slot.doc_offsets_offset) + (u128(s.max_tokens) + 1) * 4, l.slot.stride);
}

// A buffer of exactly `size` bytes (so ASan catches any read past it) starting with
// `header` (cut short when size is smaller). Bytes past the header stay uninitialised:
// validate_segment must not read them.
std::unique_ptr<std::byte[]> make_buffer(const HeaderBytes& header, size_t size) {
  auto buffer = std::make_unique_for_overwrite<std::byte[]>(std::max<size_t>(size, 1));
  std::memcpy(buffer.get(), header.bytes.data(), std::min(size, kHeaderBytes));
  return buffer;
}

class HeaderFuzzTest : public ::testing::Test {
 protected:
  // A valid header made by the real creation path.
  static void SetUpTestSuite() {
    test::ScopedRingName name("fuzz");
    RingShape shape = test::tiny_shape();
    shape.ledger_capacity = 64;
    auto ring = Ring::create(name.str(), shape);
    valid_ = new HeaderBytes(header_of(ring->base()));
  }
  static void TearDownTestSuite() {
    delete valid_;
    valid_ = nullptr;
  }
  static size_t valid_size() { return valid_->header().layout.total_size; }

  // Runs validate_segment on `header` with `size` and compares with the oracle.
  Verdict check(const HeaderBytes& header, size_t size, const std::string& trace) {
    auto buffer = make_buffer(header, size);
    const Verdict expected = expected_verdict(buffer.get(), size);
    const Verdict actual = actual_verdict(buffer.get(), size);
    EXPECT_EQ(actual, expected) << trace;
    if (actual == Verdict::kPass && expected == Verdict::kPass)
      expect_regions_inside(header.header(), size);
    return actual;
  }

  static HeaderBytes* valid_;
};
HeaderBytes* HeaderFuzzTest::valid_ = nullptr;

TEST_F(HeaderFuzzTest, TheValidHeaderPassesOnlyWithItsWholeSize) {
  EXPECT_EQ(check(*valid_, valid_size(), "exact"), Verdict::kPass);
  EXPECT_EQ(check(*valid_, valid_size() + 12345, "larger"), Verdict::kPass);
  EXPECT_EQ(check(*valid_, valid_size() - 1, "one byte short"), Verdict::kTruncated);
  EXPECT_EQ(check(*valid_, kHeaderBytes, "header only"), Verdict::kTruncated);
  EXPECT_EQ(check(*valid_, kHeaderBytes - 1, "short header"), Verdict::kTruncated);
  EXPECT_EQ(check(*valid_, 0, "empty"), Verdict::kTruncated);
}

TEST_F(HeaderFuzzTest, RandomBytesOfRandomSizesAreRejectedCleanly) {
  std::mt19937_64 rng(0x5EED0001);
  std::map<Verdict, int> seen;
  for (int iteration = 0; iteration < 5000; ++iteration) {
    const size_t size = rng() % 2 ? rng() % (2 * kHeaderBytes) : rng() % (1 << 16);
    HeaderBytes header;
    for (auto& b : header.bytes) b = std::byte(rng());
    // Get past the early checks often enough to reach the later ones.
    const int depth = int(rng() % 4);
    if (depth >= 1) header.header().magic.store(kRingMagic, std::memory_order_relaxed);
    if (depth >= 2) header.header().version = kRingVersion;
    if (depth >= 3) header.header().header_size = kHeaderBytes;
    ++seen[check(header, size, "iteration " + std::to_string(iteration))];
    if (HasFailure()) return;
  }
  // Random bytes are never a consistent header; each check must have been reached.
  EXPECT_EQ(seen[Verdict::kPass], 0);
  EXPECT_GT(seen[Verdict::kBadMagic], 0);
  EXPECT_GT(seen[Verdict::kBadVersion], 0);
  EXPECT_GT(seen[Verdict::kBadLayout], 0);
  EXPECT_GT(seen[Verdict::kTruncated], 0);
}

// Values near the edges of every limit, and the ones that make 32-bit sums wrap.
uint64_t interesting_value(std::mt19937_64& rng) {
  static constexpr uint64_t kValues[] = {0,          1,
                                         2,          3,
                                         15,         16,
                                         17,         63,
                                         64,         65,
                                         4096,       4097,
                                         65536,      65537,
                                         1u << 20,   (1u << 20) + 1,
                                         1ull << 28, (1ull << 28) + 1,
                                         0x7FFFFFFF, 0x80000000,
                                         0xFFFFFFFE, 0xFFFFFFFF,
                                         1ull << 32, UINT64_MAX};
  if (rng() % 4 == 0) return rng();
  return kValues[rng() % std::size(kValues)];
}

TEST_F(HeaderFuzzTest, MutatedValidHeadersPassOnlyWhenConsistent) {
  std::mt19937_64 rng(0x5EED0002);
  using U32Field = uint32_t RingShape::*;
  const U32Field shape_fields[] = {
      &RingShape::slot_count,   &RingShape::max_tokens,   &RingShape::hidden_size,
      &RingShape::num_layers,   &RingShape::split_layers, &RingShape::num_targets,
      &RingShape::num_drafters, &RingShape::hs_min_ready, &RingShape::ordered_claims};
  std::map<Verdict, int> seen;
  for (int iteration = 0; iteration < 20000; ++iteration) {
    HeaderBytes header = *valid_;
    RingHeader& h = header.header();
    std::string trace = "iteration " + std::to_string(iteration) + ": ";
    switch (rng() % 5) {
      case 0: {  // flip a few random bits anywhere in the header
        const int flips = 1 + int(rng() % 4);
        for (int i = 0; i < flips; ++i)
          header.bytes[rng() % kHeaderBytes] ^= std::byte(1 << rng() % 8);
        trace += "bit flips";
        break;
      }
      case 1: {  // one shape field set to an edge value; often with a matching layout
        const uint64_t value = interesting_value(rng);
        const size_t which = rng() % (std::size(shape_fields) + 3);
        if (which < std::size(shape_fields)) {
          h.shape.*shape_fields[which] = uint32_t(value);
        } else if (which == std::size(shape_fields)) {
          h.shape.dtype = DType(uint32_t(value));
        } else if (which == std::size(shape_fields) + 1) {
          h.shape.ledger_capacity = value;
        } else {
          h.shape.batch_limit = value;
        }
        // A forger (or a bug) that keeps header and layout consistent: only the shape
        // limits stand between it and the attacher. compute_layout REQUIRES a shape that
        // validate_shape accepts, so that is the only case where we can recompute.
        if (rng() % 4 != 0 && validate_shape(h.shape).empty()) {
          h.layout = compute_layout(h.shape);
        }
        trace += "shape field " + std::to_string(which) + " = " + std::to_string(value);
        break;
      }
      case 2: {  // one layout word set to an edge value or nudged
        uint64_t* words = reinterpret_cast<uint64_t*>(&h.layout);
        const size_t which = rng() % (sizeof(RingLayout) / sizeof(uint64_t));
        const uint64_t old = words[which];
        words[which] = rng() % 2 ? interesting_value(rng) : rng() % 2 ? old + 1 : old - 1;
        trace += "layout word " + std::to_string(which);
        break;
      }
      case 3: {  // fields validate_segment does not check: must still pass
        std::byte* base = header.bytes.data();
        const auto range = [&](const void* begin, const void* end) {
          const size_t from = static_cast<const std::byte*>(begin) - base;
          const size_t to = static_cast<const std::byte*>(end) - base;
          base[from + rng() % (to - from)] = std::byte(rng());
        };
        switch (rng() % 3) {
          case 0:
            range(&h.creator_uid, &h.shape);
            break;  // uid, reserved, creation time
          case 1:
            range(&h.shape.layer_ids, &h.shape.batch_limit);
            break;  // layer ids
          default:
            range(&h.ready_futex, base + kHeaderBytes);
            break;  // runtime words
        }
        trace += "unchecked field";
        break;
      }
      default:
        trace += "size only";
        break;
    }
    // Mostly the size the layout asks for; sometimes a byte short or far off.
    uint64_t size = h.layout.total_size;
    switch (rng() % 4) {
      case 0:
        size = size - 1;
        break;
      case 1:
        size = rng() % (2 * valid_size());
        break;
      default:
        break;
    }
    if (size > (64u << 20)) size = rng() % (1u << 20);  // never allocate huge buffers
    ++seen[check(header, size_t(size), trace)];
    if (HasFailure()) return;
  }
  EXPECT_GT(seen[Verdict::kPass], 1000);
  EXPECT_GT(seen[Verdict::kBadMagic], 0);
  EXPECT_GT(seen[Verdict::kBadVersion], 0);
  EXPECT_GT(seen[Verdict::kBadLayout], 0);
  EXPECT_GT(seen[Verdict::kTruncated], 0);
}

// A header whose 32-bit worker count or min-ready sum wraps into range, with the layout
// that the wrapped arithmetic implies: a forger's best attempt. It must be refused.
TEST_F(HeaderFuzzTest, WrappingShapeSumsAreRefused) {
  struct Case {
    const char* what;
    uint32_t RingShape::*field;
    uint32_t value;
  };
  const Case cases[] = {{"num_drafters", &RingShape::num_drafters, UINT32_MAX},
                        {"num_targets", &RingShape::num_targets, UINT32_MAX - 1},
                        {"hs_min_ready", &RingShape::hs_min_ready, UINT32_MAX}};
  for (const Case& c : cases) {
    HeaderBytes header = *valid_;
    RingHeader& h = header.header();
    h.shape.*c.field = c.value;
    if (c.field == &RingShape::num_targets) h.shape.num_drafters = 2;  // sum wraps to 0
    // The layout stays the valid one: compute_layout REQUIRES a valid shape, and the
    // reader must refuse the shape before it compares layouts.
    EXPECT_FALSE(validate_shape(h.shape).empty()) << c.what;
    auto buffer = make_buffer(header, valid_size());
    EXPECT_EQ(actual_verdict(buffer.get(), valid_size()), Verdict::kBadLayout) << c.what;
  }
}

}  // namespace
}  // namespace hsring
