// A same-uid process that writes into a live ring's header or truncates it: every process
// keeps using the shape and layout it validated at attach (no pointer leaves its mapping),
// check_intact() names what changed, and an access to pages a truncation took away ends
// the process with a message and exit 4 instead of a bare SIGBUS
// (docs/ring-protocol.md, "Untrusted memory").
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <random>
#include <string>

#include "common/error.h"
#include "shm/bus_guard.h"
#include "shm/ring.h"
#include "tests/shm/ring_test_util.h"

namespace hsring {
namespace {

using test::ScopedRingName;
using test::tiny_shape;

// Writes `value` over the header bytes at `offset` of the ring's live header, as another
// process of the same uid could.
template <class T>
void overwrite(Ring& ring, size_t offset, T value) {
  std::memcpy(reinterpret_cast<std::byte*>(&ring.header()) + offset, &value, sizeof value);
}

TEST(RingTamperTest, RewrittenHeaderFieldsNeitherMoveTheViewNorGoUnnoticed) {
  ScopedRingName name("tamper");
  auto creator = Ring::create(name.str(), tiny_shape());
  auto worker = Ring::attach(name.str());
  ASSERT_EQ(worker->check_intact(), "");
  const RingShape shape = worker->shape();
  const RingLayout layout = worker->layout();
  std::byte* const slot3 = worker->payload(3);

  struct Field {
    const char* name;
    size_t offset;
    uint64_t value;
    bool wide;  // 64-bit field
  };
  const Field fields[] = {
      {"slot_count", offsetof(RingHeader, shape.slot_count), 994, false},
      {"num_targets", offsetof(RingHeader, shape.num_targets), 60, false},
      {"hidden_size", offsetof(RingHeader, shape.hidden_size), 1u << 30, false},
      {"ledger_capacity", offsetof(RingHeader, shape.ledger_capacity), 1ull << 40, true},
      {"process_table_offset", offsetof(RingHeader, layout.process_table_offset), 1ull << 40, true},
      {"payload_offset", offsetof(RingHeader, layout.payload_offset), 1ull << 40, true},
      {"stride", offsetof(RingHeader, layout.slot.stride), 1ull << 40, true},
      {"version", offsetof(RingHeader, version), 77, false},
  };
  for (const Field& f : fields) {
    SCOPED_TRACE(f.name);
    std::byte saved[8];
    std::memcpy(saved, reinterpret_cast<std::byte*>(&creator->header()) + f.offset, 8);
    f.wide ? overwrite(*creator, f.offset, f.value)
           : overwrite(*creator, f.offset, uint32_t(f.value));
    // The views computed from the validated copy do not move.
    EXPECT_EQ(worker->slot_count(), shape.slot_count);
    EXPECT_EQ(worker->process_count(), shape.num_targets + shape.num_drafters);
    EXPECT_EQ(worker->payload(3), slot3);
    EXPECT_EQ(std::memcmp(&worker->layout(), &layout, sizeof layout), 0);
    const std::string damage = worker->check_intact();
    EXPECT_NE(damage.find(f.name), std::string::npos) << damage;
    EXPECT_NE(damage.find(std::to_string(f.value)), std::string::npos) << damage;
    std::memcpy(reinterpret_cast<std::byte*>(&creator->header()) + f.offset, saved, 8);
    EXPECT_EQ(worker->check_intact(), "") << "restored";
  }
  // A new attach sees the damaged header and refuses it.
  overwrite(*creator, offsetof(RingHeader, shape.slot_count), uint32_t(994));
  EXPECT_THROW(Ring::attach(name.str()), Error);
}

// Every byte of the immutable part of the header, flipped at random: check_intact never
// misses a change of a field the ring uses, and never reports one that did not happen.
TEST(RingTamperTest, RandomFlipsOfTheImmutableFieldsAreAllSeen) {
  ScopedRingName name("tamper-flip");
  auto creator = Ring::create(name.str(), tiny_shape());
  auto worker = Ring::attach(name.str());
  std::mt19937_64 rng(7);
  const size_t begin = offsetof(RingHeader, version);
  const size_t end = offsetof(RingHeader, layout) + sizeof(RingLayout);
  auto* bytes = reinterpret_cast<unsigned char*>(&creator->header());
  for (int round = 0; round < 2000; ++round) {
    const size_t at = begin + rng() % (end - begin);
    if (at >= offsetof(RingHeader, reserved0) && at < offsetof(RingHeader, reserved0) + 4) continue;
    if (at >= offsetof(RingHeader, created_unix_ns) && at < offsetof(RingHeader, shape)) continue;
    const unsigned char saved = bytes[at];
    bytes[at] = saved ^ static_cast<unsigned char>(1u << (rng() % 8));
    EXPECT_NE(worker->check_intact(), "") << "byte " << at << " changed unseen";
    bytes[at] = saved;
    ASSERT_EQ(worker->check_intact(), "") << "byte " << at << " restored";
  }
}

TEST(RingTamperTest, ATruncatedSegmentIsReportedAndItsLostPagesEndTheProcessWithAMessage) {
  ScopedRingName name("tamper-trunc");
  auto creator = Ring::create(name.str(), tiny_shape());
  int go_pipe[2], err_pipe[2];  // parent -> child: "truncated"; child's stderr -> parent
  ASSERT_EQ(::pipe(go_pipe), 0);
  ASSERT_EQ(::pipe(err_pipe), 0);
  // Attached before the fork: the child inherits the mapping and its guard.
  auto ring = Ring::attach(name.str());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::dup2(err_pipe[1], STDERR_FILENO);
    ::close(err_pipe[0]);
    ::close(go_pipe[1]);
    char go = 0;
    if (::read(go_pipe[0], &go, 1) != 1) ::_exit(90);
    if (ring->check_intact().find("truncated") == std::string::npos) ::_exit(91);
    // The last slot's payload lies past the new end: touching it raises SIGBUS.
    volatile std::byte* last = ring->payload(ring->slot_count() - 1);
    last[0] = std::byte{1};
    ::_exit(92);  // not reached
  }
  ::close(go_pipe[0]);
  ::close(err_pipe[1]);
  const std::string path = Ring::path_of(name.str());
  ASSERT_EQ(::truncate(path.c_str(), 4096), 0);
  ASSERT_EQ(::write(go_pipe[1], "g", 1), 1);
  ::close(go_pipe[1]);
  std::string err;
  char buffer[512];
  ssize_t n;
  while ((n = ::read(err_pipe[0], buffer, sizeof buffer)) > 0) err.append(buffer, size_t(n));
  ::close(err_pipe[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), kExitRingLost) << err;
  EXPECT_NE(err.find("ring '" + name.str() + "' lost its pages"), std::string::npos) << err;
}

// A SIGBUS that is not about a ring keeps its default action.
TEST(RingTamperTest, ASigbusOutsideEveryRingStillKills) {
  ScopedRingName name("tamper-other");
  auto ring = Ring::create(name.str(), tiny_shape());  // installs the handler
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::raise(SIGBUS);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGBUS);
}

}  // namespace
}  // namespace hsring
