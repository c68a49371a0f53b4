// How NCCL drafter group members meet (drafter_proc/group_rendezvous.h), without NCCL: on
// one machine a member takes only the id of drafter 0's live incarnation and sees the
// group end when drafter 0 restarts; across machines the file rendezvous records the
// member's generation, and its leaving ends the group for the others.
#include "drafter_proc/group_rendezvous.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "shm/ring.h"
#include "tests/data/test_corpus.h"
#include "tests/shm/ring_test_util.h"

namespace hsring {
namespace {

GroupId id_of(uint8_t seed) {
  GroupId id;
  for (size_t i = 0; i < id.size(); ++i) id[i] = uint8_t(seed + i * 3);
  return id;
}

TEST(GroupRendezvousTest, OnOneMachineAMemberTakesOnlyTheLiveLeadersId) {
  test::ScopedRingName name;
  auto ring = Ring::create(name.str(), test::tiny_shape());
  PeerStatus leader{3, true};  // what the ring's process table says of drafter 0
  const PeerWatch peers = [&leader](uint32_t member) {
    return member == 0 ? leader : PeerStatus{1, true};
  };
  auto member = ring_rendezvous(*ring, 1, 1, peers);
  EXPECT_FALSE(member->poll()) << "nothing published yet";
  // An id left by incarnation 2 is never taken while incarnation 3 runs.
  ring_rendezvous(*ring, 0, 2, peers)->publish(id_of(2));
  EXPECT_FALSE(member->poll());
  ring_rendezvous(*ring, 0, 3, peers)->publish(id_of(3));
  leader.alive = false;
  EXPECT_FALSE(member->poll()) << "a dead leader's id";
  leader.alive = true;
  const std::optional<GroupId> id = member->poll();
  ASSERT_TRUE(id);
  EXPECT_EQ(*id, id_of(3));
  EXPECT_EQ(member->ended(), "");
  leader.epoch = 4;  // drafter 0 restarted
  EXPECT_NE(member->ended().find("drafter 0 restarted"), std::string::npos);
}

TEST(GroupRendezvousTest, AcrossMachinesLeavingEndsTheGenerationForEveryone) {
  data::testing::TempDir dir;
  auto leader = file_rendezvous(dir.path(), 2, 0);
  auto member = file_rendezvous(dir.path(), 2, 1);
  EXPECT_FALSE(member->poll());
  EXPECT_NE(member->waiting_for().find("has not published"), std::string::npos);
  leader->publish(id_of(7));
  const std::optional<GroupId> id = member->poll();
  ASSERT_TRUE(id);
  EXPECT_EQ(*id, id_of(7));
  EXPECT_NE(member->describe().find("generation 1"), std::string::npos) << member->describe();
  EXPECT_EQ(leader->ended(), "");
  member->leave();
  // The leader looks at the files at most every 200 ms: within a second it sees the end.
  std::string ended;
  for (int i = 0; i < 100 && ended.empty(); ++i) {
    ended = leader->ended();
    if (ended.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_NE(ended.find("a member left"), std::string::npos) << ended;
  // The member's next incarnation waits for the leader's next generation.
  auto restarted = file_rendezvous(dir.path(), 2, 1);
  EXPECT_FALSE(restarted->poll());
  file_rendezvous(dir.path(), 2, 0)->publish(id_of(8));
  const std::optional<GroupId> next = restarted->poll();
  ASSERT_TRUE(next);
  EXPECT_EQ(*next, id_of(8));
}

// One machine's run stops (its drafter calls stop()): the members of its generation on
// other machines learn it; a member of a later run in the same folder (a resume) does not.
TEST(GroupRendezvousTest, AcrossMachinesAStoppedRunStopsTheGenerationsMembers) {
  data::testing::TempDir dir;
  auto leader = file_rendezvous(dir.path(), 2, 0);
  auto member = file_rendezvous(dir.path(), 2, 1);
  leader->publish(id_of(1));
  ASSERT_TRUE(member->poll());
  EXPECT_FALSE(leader->stopped());
  member->stop();
  bool stopped = false;
  for (int i = 0; i < 100 && !stopped; ++i) {
    stopped = leader->stopped();
    if (!stopped) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(leader->ended(), "") << "a stop is no break: nobody restarts";
  // The resumed run: its members have joined nothing yet and wait for the new leader.
  auto resumed = file_rendezvous(dir.path(), 2, 1);
  EXPECT_FALSE(resumed->stopped());
  file_rendezvous(dir.path(), 2, 0)->publish(id_of(2));
  ASSERT_TRUE(resumed->poll());
  EXPECT_FALSE(resumed->stopped());
}

}  // namespace
}  // namespace hsring
