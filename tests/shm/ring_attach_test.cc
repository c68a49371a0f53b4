// Creating, attaching and removing ring segments: every way an attach or a create can be
// refused has its own Errc and a message that names the ring (ring-protocol.md invariant 7).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <climits>
#include <cstring>
#include <functional>
#include <random>

#include "common/error.h"
#include "shm/ring.h"
#include "tests/shm/ring_test_util.h"

namespace hsring {
namespace {

using test::ScopedRingName;
using test::tiny_shape;

// Runs `action`, which must throw Error `code` with a message naming `ring`; returns
// the message for further checks.
std::string expect_ring_error(const std::function<void()>& action, Errc code,
                              const std::string& ring) {
  try {
    action();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << "got " << to_string(e.code()) << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("'" + ring + "'"), std::string::npos)
        << "the message must name the ring: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected Error " << to_string(code) << ", nothing was thrown";
  return "";
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

class RingAttachTest : public ::testing::Test {
 protected:
  std::unique_ptr<Ring> create() { return Ring::create(name_.str(), tiny_shape()); }
  void expect_attach_error(Errc code) {
    expect_ring_error([&] { Ring::attach(name_.str()); }, code, name_.str());
  }

  ScopedRingName name_{"attach"};
};

TEST_F(RingAttachTest, CreateThenAttachMapsTheSameSegment) {
  auto created = create();
  auto attached = Ring::attach(name_.str());
  EXPECT_TRUE(attached->writable());
  EXPECT_EQ(attached->size(), created->size());
  EXPECT_EQ(attached->size(), created->layout().total_size);
  EXPECT_EQ(std::memcmp(&attached->shape(), &created->shape(), sizeof(RingShape)), 0);
  EXPECT_EQ(attached->process_count(), 4u);
  EXPECT_EQ(Role(attached->process(1).role.load()), Role::kTarget);
  EXPECT_EQ(Role(attached->process(2).role.load()), Role::kDrafter);
  EXPECT_EQ(attached->process(3).gpu.load(), -1);
  // Two mappings of one segment: a store through one is visible through the other.
  created->slot(3).batch_id.store(4242);
  created->tokens(5)[7] = 99;
  EXPECT_EQ(attached->slot(3).batch_id.load(), 4242u);
  EXPECT_EQ(attached->tokens(5)[7], 99);
  EXPECT_NE(attached->base(), created->base());
  EXPECT_NE(attached->fd(), created->fd()) << "each attach needs its own open file description";
}

TEST_F(RingAttachTest, ReadOnlyAttachIsNotWritable) {
  auto created = create();
  auto reader = Ring::attach(name_.str(), Ring::Access::kReadOnly);
  EXPECT_FALSE(reader->writable());
  EXPECT_EQ(reader->slot_count(), tiny_shape().slot_count);
}

TEST_F(RingAttachTest, CreatedSegmentIsMode0600WhateverTheUmask) {
  const mode_t old_umask = ::umask(0);  // a umask that would leave 0666 as it is
  std::unique_ptr<Ring> ring;
  try {
    ring = create();
  } catch (...) {
    ::umask(old_umask);
    throw;
  }
  ::umask(old_umask);
  struct stat st {};
  ASSERT_EQ(::stat(name_.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  EXPECT_EQ(ring->header().creator_uid, ::geteuid());
}

TEST_F(RingAttachTest, AttachToAMissingNameIsNotFound) {
  const std::string message =
      expect_ring_error([&] { Ring::attach(name_.str()); }, Errc::kRingNotFound, name_.str());
  EXPECT_NE(message.find(name_.path()), std::string::npos) << message;
}

TEST_F(RingAttachTest, CreateOnAnExistingNameIsExistsAndLeavesItAlone) {
  auto first = create();
  first->slot(0).batch_id.store(7);
  expect_ring_error([&] { create(); }, Errc::kRingExists, name_.str());
  auto attached = Ring::attach(name_.str());
  EXPECT_EQ(attached->slot(0).batch_id.load(), 7u) << "a failed create must not reset the ring";
}

TEST_F(RingAttachTest, GarbageOverTheHeaderIsBadMagic) {
  auto ring = create();
  std::mt19937_64 rng(12345);
  for (size_t i = 0; i < sizeof(RingHeader); ++i) ring->base()[i] = std::byte(rng());
  expect_attach_error(Errc::kRing);
}

TEST_F(RingAttachTest, NeverInitialisedHeaderIsBadMagic) {
  // A creator that died before its release store of the magic leaves zeros.
  auto ring = create();
  ring->header().magic.store(0);
  expect_attach_error(Errc::kRing);
}

TEST_F(RingAttachTest, OtherProtocolVersionIsBadVersion) {
  auto ring = create();
  ring->header().version = kRingVersion + 1;
  const std::string message = [&] {
    try {
      Ring::attach(name_.str());
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kRing) << e.what();
      return std::string(e.what());
    }
    return std::string();
  }();
  EXPECT_NE(message.find("'" + name_.str() + "'"), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(kRingVersion + 1)), std::string::npos) << message;
}

TEST_F(RingAttachTest, CorruptLayoutFieldIsBadLayout) {
  auto ring = create();
  ring->header().layout.slot.tokens_offset += 64;
  expect_attach_error(Errc::kRing);
}

TEST_F(RingAttachTest, CorruptTotalSizeIsBadLayout) {
  auto ring = create();
  ring->header().layout.total_size -= kRegionAlign;
  expect_attach_error(Errc::kRing);
}

TEST_F(RingAttachTest, WrongHeaderSizeIsBadLayout) {
  auto ring = create();
  ring->header().header_size = sizeof(RingHeader) + 8;
  expect_attach_error(Errc::kRing);
}

TEST_F(RingAttachTest, ImpossibleShapeInTheHeaderIsBadLayout) {
  auto ring = create();
  ring->header().shape.num_layers = kMaxCapturedLayers + 1;
  expect_attach_error(Errc::kRing);
}

TEST_F(RingAttachTest, ShapeChangedWithoutItsLayoutIsBadLayout) {
  // Still a valid shape, but the stored layout no longer follows from it.
  auto ring = create();
  ring->header().shape.max_tokens += 1;
  expect_attach_error(Errc::kRing);
}

TEST_F(RingAttachTest, SegmentShorterThanItsLayoutIsTruncated) {
  auto ring = create();
  ASSERT_EQ(::truncate(name_.path().c_str(), off_t(ring->size() - kRegionAlign)), 0);
  const std::string message = [&] {
    try {
      Ring::attach(name_.str());
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kRing) << e.what();
      return std::string(e.what());
    }
    ADD_FAILURE() << "attach accepted a truncated segment";
    return std::string();
  }();
  EXPECT_NE(message.find("'" + name_.str() + "'"), std::string::npos) << message;
}

TEST_F(RingAttachTest, SegmentShorterThanTheHeaderIsTruncated) {
  auto ring = create();
  ASSERT_EQ(::truncate(name_.path().c_str(), off_t(sizeof(RingHeader) - 1)), 0);
  expect_attach_error(Errc::kRing);
}

TEST_F(RingAttachTest, TinyAndEmptyFilesAreTruncated) {
  // Not made by hsring at all: a file of a few bytes, then an empty one.
  const int fd = ::open(name_.path().c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fd, "HSRING", 6), 6);
  expect_attach_error(Errc::kRing);
  ASSERT_EQ(::ftruncate(fd, 0), 0);
  expect_attach_error(Errc::kRing);
  ::close(fd);
}

TEST_F(RingAttachTest, SegmentOfAnotherUserIsForeignOwner) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to hand the segment to another user";
  auto ring = create();
  ASSERT_EQ(::chown(name_.path().c_str(), 65534, 65534), 0) << std::strerror(errno);
  const std::string message = [&] {
    try {
      Ring::attach(name_.str());
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kRing) << e.what();
      return std::string(e.what());
    }
    ADD_FAILURE() << "attach accepted another user's segment";
    return std::string();
  }();
  EXPECT_NE(message.find("'" + name_.str() + "'"), std::string::npos) << message;
  EXPECT_NE(message.find("65534"), std::string::npos) << message;
}

// The same check as the gradient exchange's (shm/segment_file.h): mode 0600 or nothing.
TEST_F(RingAttachTest, SegmentOthersMayWriteIsRefused) {
  auto ring = create();
  ASSERT_EQ(::chmod(name_.path().c_str(), 0666), 0) << std::strerror(errno);
  try {
    Ring::attach(name_.str());
    ADD_FAILURE() << "attach accepted a segment of mode 0666";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kRing) << e.what();
    EXPECT_NE(std::string(e.what()).find("mode 0666"), std::string::npos) << e.what();
  }
}

TEST_F(RingAttachTest, RemoveUnlinksButKeepsExistingMappings) {
  auto ring = create();
  EXPECT_TRUE(Ring::remove(name_.str()));
  EXPECT_FALSE(path_exists(name_.path()));
  EXPECT_FALSE(Ring::remove(name_.str())) << "a second remove finds nothing";
  EXPECT_EQ(ring->header().magic.load(), kRingMagic) << "the mapping outlives the name";
  expect_attach_error(Errc::kRingNotFound);
}

// Each impossible shape is refused before anything is created.
TEST_F(RingAttachTest, InvalidShapesAreBadShapeAndLeaveNothingBehind) {
  struct Case {
    const char* what;
    std::function<void(RingShape&)> mutate;
  };
  const Case cases[] = {
      {"one slot", [](RingShape& s) { s.slot_count = 1; }},
      {"too many slots", [](RingShape& s) { s.slot_count = kMaxSlots + 1; }},
      {"no tokens", [](RingShape& s) { s.max_tokens = 0; }},
      {"too many tokens", [](RingShape& s) { s.max_tokens = (1u << 20) + 1; }},
      {"no hidden", [](RingShape& s) { s.hidden_size = 0; }},
      {"hidden too large", [](RingShape& s) { s.hidden_size = (1u << 16) + 1; }},
      {"no layers", [](RingShape& s) { s.num_layers = 0; }},
      {"too many layers", [](RingShape& s) { s.num_layers = kMaxCapturedLayers + 1; }},
      {"unknown dtype", [](RingShape& s) { s.dtype = DType(0); }},
      {"unknown dtype 4", [](RingShape& s) { s.dtype = DType(4); }},
      {"split 2", [](RingShape& s) { s.split_layers = 2; }},
      {"no targets", [](RingShape& s) { s.num_targets = 0; }},
      {"no drafters", [](RingShape& s) { s.num_drafters = 0; }},
      {"too many workers",
       [](RingShape& s) {
         s.slot_count = 128;
         s.num_targets = kMaxProcesses / 2;
         s.num_drafters = kMaxProcesses / 2 + 1;
       }},
      {"min ready 0", [](RingShape& s) { s.hs_min_ready = 0; }},
      {"min ready leaves no slot per target",
       [](RingShape& s) { s.hs_min_ready = s.slot_count - s.num_targets + 1; }},
      {"no ledger", [](RingShape& s) { s.ledger_capacity = 0; }},
      {"ledger too large", [](RingShape& s) { s.ledger_capacity = (1ull << 28) + 1; }},
      {"batch limit past the ledger", [](RingShape& s) { s.batch_limit = s.ledger_capacity + 1; }},
      // 32-bit sums must not wrap into range.
      {"drafters wrap the worker count", [](RingShape& s) { s.num_drafters = UINT32_MAX; }},
      {"targets wrap the worker count", [](RingShape& s) { s.num_targets = UINT32_MAX - 1; }},
      {"min ready wraps", [](RingShape& s) { s.hs_min_ready = UINT32_MAX; }},
      {"min ready wraps to 0", [](RingShape& s) { s.hs_min_ready = UINT32_MAX - 1; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    RingShape shape = tiny_shape();
    c.mutate(shape);
    EXPECT_FALSE(validate_shape(shape).empty());
    expect_ring_error([&] { Ring::create(name_.str(), shape); }, Errc::kRingBadShape, name_.str());
    EXPECT_FALSE(path_exists(name_.path()));
    Ring::remove(name_.str());  // after a wrongly accepted shape, keep the next case clean
  }
}

TEST_F(RingAttachTest, ShapesAtTheLimitsAreValid) {
  RingShape shape = tiny_shape();
  shape.hs_min_ready = shape.slot_count - shape.num_targets;  // exactly one slot per target
  shape.batch_limit = shape.ledger_capacity;
  EXPECT_EQ(validate_shape(shape), "");
  shape = tiny_shape();
  shape.slot_count = 128;
  shape.num_targets = kMaxProcesses / 2;
  shape.num_drafters = kMaxProcesses / 2;
  EXPECT_EQ(validate_shape(shape), "");
  auto ring = Ring::create(name_.str(), shape);
  EXPECT_EQ(ring->process_count(), kMaxProcesses);
}

TEST_F(RingAttachTest, FullDevShmIsNoSpaceAndLeavesNothingBehind) {
  struct statvfs fs {};
  ASSERT_EQ(::statvfs("/dev/shm", &fs), 0);
  const uint64_t capacity = uint64_t(fs.f_blocks) * fs.f_frsize;
  if (capacity == 0) GTEST_SKIP() << "/dev/shm has no size limit";
  // Larger than all of /dev/shm, not just its free space: tmpfs then refuses at once
  // instead of filling /dev/shm for other tests before failing.
  RingShape shape = tiny_shape();
  shape.slot_count = 2;
  shape.num_targets = 1;
  shape.num_drafters = 1;
  shape.hidden_size = 1u << 16;
  shape.num_layers = kMaxCapturedLayers;
  shape.dtype = DType::kFP32;
  const uint64_t slot_bytes_per_token = uint64_t(shape.hidden_size) * 4 * shape.num_layers;
  shape.max_tokens = uint32_t(capacity / (slot_bytes_per_token * shape.slot_count) + 1);
  ASSERT_EQ(validate_shape(shape), "");
  ASSERT_GT(compute_layout(shape).total_size, uint64_t(fs.f_bavail) * fs.f_frsize);
  const std::string message =
      expect_ring_error([&] { Ring::create(name_.str(), shape); }, Errc::kRing, name_.str());
  EXPECT_NE(message.find("/dev/shm"), std::string::npos) << message;
  EXPECT_FALSE(path_exists(name_.path())) << "a failed create must remove its segment";
}

// The layout every attacher trusts: regions in order, page aligned and disjoint, and the
// payload regions of a slot inside its stride.
TEST(RingLayoutTest, RegionsAreAlignedOrderedAndDisjoint) {
  for (uint32_t split : {0u, 1u}) {
    RingShape shape = tiny_shape();
    shape.split_layers = split;
    shape.num_layers = 5;
    shape.hidden_size = 1000;  // rows that are not page multiples
    shape.max_tokens = 37;
    ASSERT_EQ(validate_shape(shape), "");
    const RingLayout l = compute_layout(shape);
    const uint64_t procs = shape.num_targets + shape.num_drafters;
    const uint64_t starts[] = {l.process_table_offset, l.target_progress_offset, l.ledger_offset,
                               l.slot_headers_offset, l.payload_offset};
    for (uint64_t start : starts) EXPECT_EQ(start % kRegionAlign, 0u);
    EXPECT_GE(l.process_table_offset, sizeof(RingHeader));
    EXPECT_GE(l.target_progress_offset, l.process_table_offset + procs * sizeof(ProcessEntry));
    EXPECT_GE(l.ledger_offset,
              l.target_progress_offset + shape.num_targets * sizeof(TargetProgress));
    EXPECT_GE(l.slot_headers_offset, l.ledger_offset + shape.ledger_capacity * sizeof(LedgerEntry));
    EXPECT_GE(l.payload_offset, l.slot_headers_offset + shape.slot_count * sizeof(SlotHeader));
    EXPECT_EQ(l.total_size, l.payload_offset + l.slot.stride * shape.slot_count);

    const SlotLayout& s = l.slot;
    const uint64_t row_bytes = uint64_t(shape.hidden_size) * dtype_size(shape.dtype);
    EXPECT_EQ(s.layer_bytes, row_bytes * shape.max_tokens);
    const uint64_t hs_end = split ? s.layer_offset[shape.num_layers - 1] + s.layer_bytes
                                  : s.layer_offset[0] + s.layer_bytes * shape.num_layers;
    for (uint32_t k = 0; split && k + 1 < shape.num_layers; ++k)
      EXPECT_GE(s.layer_offset[k + 1], s.layer_offset[k] + s.layer_bytes);
    const uint64_t ints = uint64_t(shape.max_tokens) * sizeof(int32_t);
    EXPECT_GE(s.tokens_offset, hs_end);
    EXPECT_GE(s.positions_offset, s.tokens_offset + ints);
    EXPECT_GE(s.doc_offsets_offset, s.positions_offset + ints);
    EXPECT_GE(s.labels_offset, s.doc_offsets_offset + ints + sizeof(int32_t));
    EXPECT_GE(s.stride, s.labels_offset + ints);
    EXPECT_EQ(s.stride % kRegionAlign, 0u);
  }
}

}  // namespace
}  // namespace hsring
