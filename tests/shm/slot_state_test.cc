// The slot state word: encoding, version wrap, ownership predicates, and the property the
// protocol rests on: a CAS from an old word fails after any transition (no ABA).
#include "shm/slot_state.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <unordered_set>

namespace hsring {
namespace {

constexpr SlotPhase kAllPhases[] = {SlotPhase::kFree, SlotPhase::kClaimed, SlotPhase::kWriting,
                                    SlotPhase::kReady, SlotPhase::kReading};

// The encoding is constexpr: compile-time checks document it as well as runtime ones.
static_assert(SlotState::make(SlotPhase::kReading, 7, 9, 11).phase() == SlotPhase::kReading);
static_assert(SlotState::make(SlotPhase::kReading, 7, 9, 11).owner() == 7);
static_assert(SlotState().phase() == SlotPhase::kFree, "zeroed memory must read as FREE");
static_assert(sizeof(SlotState) == sizeof(uint64_t));

TEST(SlotStateTest, RoundTripsEveryFieldAtItsLimits) {
  const uint32_t owners[] = {0, 1, 63, SlotState::kMaxOwners - 1};
  const uint32_t epochs[] = {0, 1, 12345, SlotState::kEpochMask};
  const uint32_t versions[] = {0, 1, 0x7FFFFFFFu, 0xFFFFFFFFu};
  for (SlotPhase phase : kAllPhases) {
    for (uint32_t owner : owners) {
      for (uint32_t epoch : epochs) {
        for (uint32_t version : versions) {
          const SlotState s = SlotState::make(phase, owner, epoch, version);
          EXPECT_EQ(s.phase(), phase);
          EXPECT_EQ(s.owner(), owner);
          EXPECT_EQ(s.epoch(), epoch);
          EXPECT_EQ(s.version(), version);
          EXPECT_EQ(SlotState(s.word()), s) << "word() must be the whole state";
        }
      }
    }
  }
}

TEST(SlotStateTest, OutOfRangeOwnerAndEpochAreMaskedNotSpilled) {
  // An epoch past 21 bits keeps its low bits and must not leak into the owner or phase.
  const SlotState s = SlotState::make(SlotPhase::kClaimed, 3, SlotState::kEpochMask + 6, 0);
  EXPECT_EQ(s.phase(), SlotPhase::kClaimed);
  EXPECT_EQ(s.owner(), 3u);
  EXPECT_EQ(s.epoch(), 5u);
  const SlotState t = SlotState::make(SlotPhase::kFree, SlotState::kMaxOwners + 2, 0, 0);
  EXPECT_EQ(t.phase(), SlotPhase::kFree);
  EXPECT_EQ(t.owner(), 2u);
}

TEST(SlotStateTest, NextSetsTheNewOwnerAndBumpsTheVersion) {
  const SlotState s = SlotState::make(SlotPhase::kFree, 0, 0, 41);
  const SlotState n = s.next(SlotPhase::kClaimed, 5, 77);
  EXPECT_EQ(n.phase(), SlotPhase::kClaimed);
  EXPECT_EQ(n.owner(), 5u);
  EXPECT_EQ(n.epoch(), 77u);
  EXPECT_EQ(n.version(), 42u);
}

TEST(SlotStateTest, VersionWrapsWithoutTouchingOtherFields) {
  const SlotState s = SlotState::make(SlotPhase::kReading, SlotState::kMaxOwners - 1,
                                      SlotState::kEpochMask, 0xFFFFFFFFu);
  const SlotState n = s.next(SlotPhase::kReading, SlotState::kMaxOwners - 1, SlotState::kEpochMask);
  EXPECT_EQ(n.version(), 0u);
  EXPECT_EQ(n.phase(), SlotPhase::kReading) << "the version carry must not reach the phase";
  EXPECT_EQ(n.owner(), SlotState::kMaxOwners - 1);
  EXPECT_EQ(n.epoch(), SlotState::kEpochMask);
  EXPECT_NE(n, s);
}

TEST(SlotStateTest, OwnedOnlyInClaimedWritingAndReading) {
  for (SlotPhase phase : kAllPhases) {
    const bool expected = phase == SlotPhase::kClaimed || phase == SlotPhase::kWriting ||
                          phase == SlotPhase::kReading;
    EXPECT_EQ(SlotState::make(phase, 1, 1, 1).owned(), expected) << to_string(phase);
  }
}

TEST(SlotStateTest, HeldByNeedsAnOwnedPhaseTheOwnerAndTheEpoch) {
  for (SlotPhase phase : kAllPhases) {
    const SlotState s = SlotState::make(phase, 4, 9, 100);
    const bool owned = s.owned();
    EXPECT_EQ(s.held_by(4, 9), owned) << to_string(phase);
    EXPECT_FALSE(s.held_by(5, 9)) << to_string(phase);
    EXPECT_FALSE(s.held_by(4, 8)) << to_string(phase);
    EXPECT_FALSE(s.held_by(4, 10)) << to_string(phase);
    // Epochs compare in their stored (low 21) bits: epoch 9 + 2^21 is the same stored epoch.
    EXPECT_EQ(s.held_by(4, 9 + (SlotState::kEpochMask + 1)), owned) << to_string(phase);
  }
}

TEST(SlotStateTest, PhaseNamesAreDistinct) {
  std::unordered_set<std::string> names;
  for (SlotPhase phase : kAllPhases) names.insert(to_string(phase));
  EXPECT_EQ(names.size(), size_t(kSlotPhaseCount));
  EXPECT_STREQ(to_string(SlotPhase::kReady), "READY");
  EXPECT_STREQ(to_string(SlotPhase(7)), "INVALID");
}

// For every pair of phases: after A -> B -> A with the same owner and epoch, the word is
// new, so a CAS that expects the first A word fails, and one from the current word works.
TEST(SlotStateTest, CasFromAnOldWordFailsAfterACycleBackToTheSamePhaseAndOwner) {
  for (SlotPhase a : kAllPhases) {
    for (SlotPhase b : kAllPhases) {
      std::atomic<uint64_t> state{SlotState::make(a, 3, 17, 1000).word()};
      const SlotState old(state.load());
      SlotState now = old.next(b, 3, 17);
      state.store(now.word());
      now = now.next(a, 3, 17);
      state.store(now.word());
      ASSERT_EQ(now.phase(), old.phase());
      ASSERT_EQ(now.owner(), old.owner());
      ASSERT_EQ(now.epoch(), old.epoch());

      uint64_t expected = old.word();
      const uint64_t stolen = old.next(SlotPhase::kFree, 0, 0).word();
      EXPECT_FALSE(state.compare_exchange_strong(expected, stolen))
          << to_string(a) << " -> " << to_string(b) << " -> " << to_string(a);
      EXPECT_EQ(state.load(), now.word()) << "a failed CAS must leave the word as it was";
      expected = now.word();
      EXPECT_TRUE(state.compare_exchange_strong(expected, now.next(b, 0, 0).word()));
    }
  }
}

// Over many protocol cycles by the same owner and epoch, every transition installs a word
// never seen before on that slot: the version alone keeps them apart.
TEST(SlotStateTest, WordsNeverRepeatAcrossManyProtocolCycles) {
  std::unordered_set<uint64_t> seen;
  SlotState s;
  seen.insert(s.word());
  const SlotPhase cycle[] = {SlotPhase::kClaimed, SlotPhase::kWriting, SlotPhase::kReady,
                             SlotPhase::kReading, SlotPhase::kFree};
  for (int round = 0; round < 20000; ++round) {
    for (SlotPhase phase : cycle) {
      const bool owned = phase != SlotPhase::kReady && phase != SlotPhase::kFree;
      s = s.next(phase, owned ? 1 : 0, owned ? 1 : 0);
      ASSERT_TRUE(seen.insert(s.word()).second) << "word repeated at round " << round;
    }
  }
}

}  // namespace
}  // namespace hsring
