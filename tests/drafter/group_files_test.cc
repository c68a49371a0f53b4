// The cross-machine drafter group's rendezvous files (drafter_proc/group_files.h): the
// generation protocol as members on several machines would run it (here: separate
// GroupFiles, as separate processes hold them), refusal of every damaged or foreign file,
// and a writer SIGKILLed at random moments never leaving a file a reader half sees.
#include "drafter_proc/group_files.h"
#include "common/error.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "../data/test_corpus.h"
#include "common/text_file.h"
#include "tests/common/planted_files.h"

namespace hsring {
namespace {

using data::testing::TempDir;

GroupId id_of(uint8_t seed) {
  GroupId id;
  for (size_t i = 0; i < id.size(); ++i) id[i] = uint8_t(seed * 31 + i);
  return id;
}

// The rendezvous folder is shared by machines and often by users: a symlink planted at any
// group file's old temporary name (NAME.tmp.HOST.PID) never leads a write to its target.
TEST(GroupFilesTest, NoWriteGoesThroughAPlantedSymlink) {
  TempDir dir, elsewhere;
  const std::string victim = elsewhere.path() + "/victim";
  testing::make_victim(victim);
  for (const char* name : {"group", "member-0", "member-1", "broken-1", "stopped-1"})
    testing::plant_symlink(testing::old_temporary_name(dir.path() + "/" + name, ::getpid()),
                           victim);
  GroupFiles leader(dir.path(), 2, 0), member(dir.path(), 2, 1);
  const uint64_t g = leader.publish(id_of(7));
  ASSERT_TRUE(member.joinable().has_value()) << member.waiting_for();
  leader.joined(g);
  member.joined(g);
  member.mark_broken(g);
  leader.mark_stopped(g);
  EXPECT_TRUE(testing::victim_untouched(victim));
  EXPECT_TRUE(leader.is_stopped(g));
  EXPECT_NE(leader.ended(g), "");
}

TEST(GroupFilesTest, MembersJoinTheLeadersGenerationOnlyOnceItIsPublished) {
  TempDir dir;
  GroupFiles leader(dir.path(), 3, 0), one(dir.path(), 3, 1), two(dir.path(), 3, 2);
  EXPECT_FALSE(one.joinable());
  EXPECT_NE(one.waiting_for().find("has not published"), std::string::npos) << one.waiting_for();
  const uint64_t g = leader.publish(id_of(1));
  EXPECT_EQ(g, 1u);
  for (GroupFiles* member : {&one, &two}) {
    const std::optional<GroupRecord> record = member->joinable();
    ASSERT_TRUE(record);
    EXPECT_EQ(record->generation, g);
    EXPECT_EQ(record->members, 3u);
    EXPECT_EQ(record->id, id_of(1));
    member->joined(g);
  }
  EXPECT_EQ(leader.ended(g), "");
  EXPECT_EQ(one.ended(g), "");
}

// Member 1 dies and its launcher restarts it: its new incarnation finds its predecessor's
// generation, marks it broken, and every member (the leader on another machine too) sees
// the group end; the leader's next incarnation publishes a generation all can join.
TEST(GroupFilesTest, ARestartedMemberEndsTheGroupItsPredecessorWasIn) {
  TempDir dir;
  GroupFiles leader(dir.path(), 2, 0);
  const uint64_t g = leader.publish(id_of(1));
  {
    GroupFiles first(dir.path(), 2, 1);
    ASSERT_TRUE(first.joinable());
    first.joined(g);
  }  // SIGKILLed
  GroupFiles second(dir.path(), 2, 1);
  EXPECT_FALSE(second.joinable());
  EXPECT_NE(second.waiting_for().find("previous incarnation"), std::string::npos);
  EXPECT_NE(leader.ended(g).find("a member left"), std::string::npos) << leader.ended(g);
  EXPECT_FALSE(second.joinable());  // still broken: no rejoining a dead group
  GroupFiles restarted_leader(dir.path(), 2, 0);
  const uint64_t next = restarted_leader.publish(id_of(2));
  EXPECT_EQ(next, g + 1);
  const std::optional<GroupRecord> record = second.joinable();
  ASSERT_TRUE(record);
  EXPECT_EQ(record->generation, next);
  EXPECT_EQ(record->id, id_of(2));
}

TEST(GroupFilesTest, ARestartedLeaderEndsTheGroupForEveryMember) {
  TempDir dir;
  GroupFiles leader(dir.path(), 2, 0), member(dir.path(), 2, 1);
  const uint64_t g = leader.publish(id_of(1));
  ASSERT_TRUE(member.joinable());
  member.joined(g);
  GroupFiles restarted(dir.path(), 2, 0);
  const uint64_t next = restarted.publish(id_of(2));
  EXPECT_NE(member.ended(g).find("published group generation " + std::to_string(next)),
            std::string::npos)
      << member.ended(g);
  // The member leaves (marking g broken, harmless), restarts and joins the new one.
  member.mark_broken(g);
  GroupFiles member_again(dir.path(), 2, 1);
  const std::optional<GroupRecord> record = member_again.joinable();
  ASSERT_TRUE(record);
  EXPECT_EQ(record->generation, next);
  EXPECT_EQ(restarted.ended(next), "");
}

TEST(GroupFilesTest, AGroupOfAnotherSizeIsNotJoined) {
  TempDir dir;
  GroupFiles leader(dir.path(), 4, 0), member(dir.path(), 2, 1);
  leader.publish(id_of(1));
  EXPECT_FALSE(member.joinable());
  EXPECT_NE(member.waiting_for().find("same number of drafters"), std::string::npos)
      << member.waiting_for();
}

TEST(GroupFilesTest, ANewGenerationSkipsBrokenNumbersLeftInAReusedFolder) {
  TempDir dir;
  GroupFiles stale(dir.path(), 2, 1);
  stale.mark_broken(1);
  stale.mark_broken(2);
  GroupFiles leader(dir.path(), 2, 0);
  EXPECT_EQ(leader.publish(id_of(1)), 3u);
}

TEST(GroupFilesTest, ForeignOrDamagedFilesAreRefusedWithThePathNamed) {
  TempDir dir;
  GroupFiles member(dir.path(), 2, 1);
  { std::ofstream(dir.file("group")) << "not a group record"; }
  try {
    member.joinable();
    FAIL() << "a foreign group file was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("group")), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--rendezvous-dir"), std::string::npos) << e.what();
  }
}

// Property: a record survives encoding; every truncation, every extension and every single
// bit flip of it is refused (the CRC covers every byte but itself, the length is exact).
TEST(GroupFilesTest, EveryTruncationAndBitFlipOfARecordIsRefused) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    GroupRecord record{1 + rng() % 1000, uint32_t(2 + rng() % 64), id_of(uint8_t(rng()))};
    const std::string bytes = encode_group_record(record);
    const GroupRecord back = decode_group_record(bytes, "group");
    EXPECT_EQ(back.generation, record.generation);
    EXPECT_EQ(back.members, record.members);
    EXPECT_EQ(back.id, record.id);
    for (size_t cut = 0; cut < bytes.size(); ++cut)
      EXPECT_THROW(decode_group_record(bytes.substr(0, cut), "group"), Error) << cut;
    EXPECT_THROW(decode_group_record(bytes + "x", "group"), Error);
    for (size_t bit = 0; bit < bytes.size() * 8; ++bit) {
      std::string flipped = bytes;
      flipped[bit / 8] = char(flipped[bit / 8] ^ (1 << (bit % 8)));
      EXPECT_THROW(decode_group_record(flipped, "group"), Error) << "bit " << bit;
    }
  }
  const std::string generation = encode_generation(42);
  EXPECT_EQ(decode_generation(generation, "member-1"), 42u);
  for (size_t cut = 0; cut < generation.size(); ++cut)
    EXPECT_THROW(decode_generation(generation.substr(0, cut), "member-1"), Error);
  EXPECT_THROW(decode_generation(encode_group_record({1, 2, {}}), "member-1"), Error);
}

// Random bytes (and random bytes behind a valid magic) never decode and never crash.
TEST(GroupFilesTest, RandomBytesAreRefused) {
  std::mt19937_64 rng(5);
  const std::string valid = encode_group_record({7, 2, id_of(3)});
  for (int i = 0; i < 5000; ++i) {
    std::string bytes(rng() % 200, '\0');
    for (char& c : bytes) c = char(rng());
    if (i % 2 == 0 && bytes.size() >= 8) std::copy(valid.begin(), valid.begin() + 8, bytes.begin());
    EXPECT_THROW(decode_group_record(bytes, "group"), Error);
  }
}

// A leader publishing in a loop is SIGKILLed at random moments (a crash mid-write): a
// reader polling meanwhile, and after each kill, sees a whole record or none, never a
// damaged one; the next leader goes on from the newest number.
TEST(GroupFilesTest, ALeaderKilledMidWriteNeverLeavesAHalfRecord) {
  TempDir dir;
  std::mt19937_64 rng(3);
  uint64_t newest = 0;
  for (int round = 0; round < 20; ++round) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      GroupFiles leader(dir.path(), 2, 0);
      for (uint8_t n = 0;; ++n) leader.publish(id_of(n));
    }
    GroupFiles reader(dir.path(), 2, 1);
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::microseconds(200 + rng() % 5000);
    uint64_t seen = newest;
    while (std::chrono::steady_clock::now() < until) {
      const std::optional<std::string> bytes = read_file_if_exists(dir.file("group"));
      if (!bytes) continue;
      const GroupRecord record = decode_group_record(*bytes, "group");  // throws if torn
      EXPECT_GE(record.generation, seen);
      seen = record.generation;
    }
    ::kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    if (const std::optional<std::string> bytes = read_file_if_exists(dir.file("group"))) {
      const GroupRecord record = decode_group_record(*bytes, "group");
      EXPECT_GE(record.generation, newest);
      newest = record.generation;
    }
  }
  GroupFiles next(dir.path(), 2, 0);
  EXPECT_EQ(next.publish(id_of(9)), newest + 1);
}

// Members on threads (as on machines) join while the leader restarts repeatedly: a member
// that joins gets a whole record of a generation the leader published, never a broken one
// at the time it looked, and generations only grow.
TEST(GroupFilesTest, MembersPollingWhileTheLeaderRestartsSeeOnlyWholeGenerations) {
  TempDir dir;
  std::atomic<bool> done{false};  // relaxed: only stops the members' loops
  // seq_cst (the default): the leader stores a number before writing its file, a member
  // loads it after reading the file, so it bounds what the member can have read.
  std::atomic<uint64_t> published{0};
  std::vector<std::thread> members;
  for (uint32_t rank = 1; rank <= 3; ++rank) {
    members.emplace_back([&, rank] {
      uint64_t last = 0;
      while (!done.load(std::memory_order_relaxed)) {
        GroupFiles member(dir.path(), 4, rank);
        if (std::optional<GroupRecord> record = member.joinable()) {
          EXPECT_GE(record->generation, last);
          EXPECT_LE(record->generation, published.load());
          EXPECT_EQ(record->id, id_of(uint8_t(record->generation)));
          last = record->generation;
        }
      }
    });
  }
  for (int restart = 0; restart < 200; ++restart) {
    GroupFiles leader(dir.path(), 4, 0);
    // Published ids are derived from their generation so members can check them.
    const uint64_t expected = published.load() + 1;
    published.store(expected);
    EXPECT_EQ(leader.publish(id_of(uint8_t(expected))), expected);
  }
  done.store(true, std::memory_order_relaxed);
  for (std::thread& t : members) t.join();
}

}  // namespace
}  // namespace hsring
