// Checkpoint directories: the writer's protocol and retention, the reader's fallback past
// damaged files (a checkpoint cut at every byte offset), and a full disk.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "checkpoint/checkpoint_files.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checkpoint_writer.h"
#include "common/error.h"
#include "test_checkpoints.h"
#include "tests/common/planted_files.h"
#include "tests/common/special_files.h"

namespace hsring::checkpoint {
namespace {

namespace fs = std::filesystem;
using test::list_names;
using test::random_checkpoint;
using test::TempDir;

std::vector<std::string> names(std::initializer_list<uint64_t> steps, bool lock = true) {
  std::vector<std::string> out;
  if (lock) out.push_back(kLockFileName);
  for (uint64_t s : steps) out.push_back(checkpoint_file_name(s));
  return out;
}

TEST(CheckpointFilesTest, Names) {
  EXPECT_EQ(checkpoint_file_name(123), "step-000000123.hsckpt");
  EXPECT_EQ(checkpoint_file_name(12345678901), "step-12345678901.hsckpt");
  EXPECT_EQ(parse_checkpoint_file_name("step-000000123.hsckpt"), 123u);
  EXPECT_EQ(parse_checkpoint_file_name("step-18446744073709551615.hsckpt"),
            18446744073709551615ull);
  for (const char* bad :
       {"step-.hsckpt", "step-1x.hsckpt", "step-18446744073709551616.hsckpt", "step-1.hsckpt.tmp",
        ".tmp-step-000000001.hsckpt.5.0", "step--1.hsckpt", "step-1.safetensors"})
    EXPECT_EQ(parse_checkpoint_file_name(bad), std::nullopt) << bad;
}

// Each I/O path of the writer: io_uring or pwrite, with or without preallocation, chunks
// small enough that many writes are in flight at once.
class CheckpointWriterTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {
 protected:
  WriterOptions options() const {
    WriterOptions o;
    o.io.use_io_uring = std::get<0>(GetParam());
    o.io.preallocate = std::get<1>(GetParam());
    o.io.chunk_bytes = 4096;
    o.io.queue_depth = 4;
    return o;
  }
};

TEST_P(CheckpointWriterTest, WritesWhatLoadLatestReturns) {
  TempDir dir;
  std::mt19937_64 rng(31);
  const Checkpoint c = random_checkpoint(rng, 5, 6, 60000);  // up to 240 KB per tensor
  CheckpointWriter writer(dir.path(), options());
  const std::string path = writer.write(c);
  EXPECT_EQ(path, dir.file("step-000000005.hsckpt"));
  EXPECT_EQ(list_names(dir.path()), names({5}));
  if (!std::get<0>(GetParam())) {
    EXPECT_FALSE(writer.used_io_uring());
  }

  const std::optional<LoadedCheckpoint> loaded = load_latest(dir.path(), {2, 4096});
  ASSERT_TRUE(loaded);
  EXPECT_TRUE(bit_identical(loaded->checkpoint, c));
  EXPECT_EQ(loaded->path, path);
  EXPECT_TRUE(loaded->rejected.empty());
  // The file is byte for byte the in-memory encoding.
  EXPECT_EQ(test::read_bytes(path), encode_checkpoint(c));
}

INSTANTIATE_TEST_SUITE_P(IoPaths, CheckpointWriterTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()));

TEST(CheckpointIoTest, UsesIoUringWhereAvailable) {
  TempDir dir;
  CheckpointWriter writer(dir.path());
  writer.write(Checkpoint{});
  // Only informative: a seccomp policy may block io_uring, and the fallback is tested above.
  if (!writer.used_io_uring()) GTEST_SKIP() << "io_uring unavailable here; pwrite was used";
}

TEST(CheckpointDirTest, TruncatedAtEveryOffsetFallsBackToThePrevious) {
  TempDir dir;
  std::mt19937_64 rng(32);
  const Checkpoint first = random_checkpoint(rng, 1, 3, 100);
  Checkpoint second = random_checkpoint(rng, 2, 4, 150);
  second.tensors.push_back({"w", {16, 40}, std::vector<float>(640, 0.25f)});  // ~3 KB in all
  std::string second_path;
  {
    CheckpointWriter writer(dir.path());
    writer.write(first);
    second_path = writer.write(second);
  }
  const std::vector<std::byte> full = test::read_bytes(second_path);
  ASSERT_GT(full.size(), 2000u);
  ASSERT_LT(full.size(), 8000u) << "keep this test fast";
  // From the longest cut down, so each cut is a truncate() of the previous file: what a
  // write that stopped there leaves.
  for (size_t cut = full.size(); cut-- > 0;) {
    ASSERT_EQ(::truncate(second_path.c_str(), off_t(cut)), 0);
    try {
      load_checkpoint(second_path);
      ADD_FAILURE() << "a checkpoint cut at byte " << cut << " loaded";
    } catch (const Error& e) {
      ASSERT_EQ(e.code(), Errc::kCheckpoint) << e.what();
      ASSERT_EQ(e.offset(), cut) << e.what();
      ASSERT_NE(std::string(e.what()).find(second_path + ": byte " + std::to_string(cut)),
                std::string::npos)
          << e.what();
    }
    const std::optional<LoadedCheckpoint> loaded = load_latest(dir.path());
    ASSERT_TRUE(loaded) << cut;
    ASSERT_EQ(loaded->checkpoint.step, 1u) << cut;
    ASSERT_EQ(loaded->rejected.size(), 1u) << cut;
    ASSERT_EQ(loaded->rejected[0].path, second_path);
    ASSERT_EQ(loaded->rejected[0].code, Errc::kCheckpoint);
    if (cut % 512 == 0) {
      ASSERT_TRUE(bit_identical(loaded->checkpoint, first));
    }
  }
  test::write_bytes(second_path, full);
  EXPECT_TRUE(bit_identical(load_latest(dir.path())->checkpoint, second));
}

TEST(CheckpointDirTest, BitFlipsInTheNewestFallBack) {
  TempDir dir;
  std::mt19937_64 rng(33);
  std::string newest;
  {
    CheckpointWriter writer(dir.path());
    writer.write(random_checkpoint(rng, 10, 2, 50));
    newest = writer.write(random_checkpoint(rng, 20, 3, 300));
  }
  const std::vector<std::byte> valid = test::read_bytes(newest);
  for (int i = 0; i < 300; ++i) {
    std::vector<std::byte> f = valid;
    // Every bit of the header, then a sample of the rest.
    const size_t byte = i < 64 * 4 ? size_t(i / 4) : size_t(rng() % f.size());
    f[byte] ^= std::byte(1u << (i < 64 * 4 ? (i % 4) * 2 + rng() % 2 : rng() % 8));
    test::write_bytes(newest, f);
    const std::optional<LoadedCheckpoint> loaded = load_latest(dir.path());
    ASSERT_TRUE(loaded);
    ASSERT_EQ(loaded->checkpoint.step, 10u) << "byte " << byte;
    ASSERT_EQ(loaded->rejected.size(), 1u);
    EXPECT_NE(loaded->rejected[0].reason.find(newest), std::string::npos);
  }
}

TEST(CheckpointDirTest, NoValidCheckpointIsAnErrorNotAFreshStart) {
  TempDir dir;
  std::mt19937_64 rng(34);
  {
    CheckpointWriter writer(dir.path());
    writer.write(random_checkpoint(rng, 1, 1, 10));
    writer.write(random_checkpoint(rng, 2, 1, 10));
  }
  test::write_bytes(dir.file("step-000000001.hsckpt"), std::vector<std::byte>(3));
  std::vector<std::byte> f = test::read_bytes(dir.file("step-000000002.hsckpt"));
  f[100] ^= std::byte{4};
  test::write_bytes(dir.file("step-000000002.hsckpt"), f);
  try {
    load_latest(dir.path());
    FAIL() << "loaded from a directory of damaged checkpoints";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kCheckpoint);
    const std::string what = e.what();
    EXPECT_NE(what.find("step-000000001.hsckpt: byte 0: not an hsring checkpoint"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("step-000000002.hsckpt: byte"), std::string::npos) << what;
    EXPECT_NE(what.find("refusing to start over"), std::string::npos) << what;
  }
}

TEST(CheckpointDirTest, EmptyMissingAndForeignDirectories) {
  TempDir dir;
  EXPECT_EQ(load_latest(dir.path()), std::nullopt);
  try {
    load_latest(dir.file("missing"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kCheckpoint);
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos);
  }
  // Temporaries and other names are not checkpoints.
  test::write_bytes(dir.file(".tmp-step-000000009.hsckpt.1.0"), std::vector<std::byte>(10));
  test::write_bytes(dir.file("notes.txt"), std::vector<std::byte>(10));
  test::write_bytes(dir.file("step-x.hsckpt"), std::vector<std::byte>(10));
  EXPECT_EQ(load_latest(dir.path()), std::nullopt);
}

TEST(CheckpointDirTest, StepMustMatchTheFileName) {
  TempDir dir;
  std::mt19937_64 rng(35);
  {
    CheckpointWriter writer(dir.path());
    writer.write(random_checkpoint(rng, 2, 1, 10));
  }
  fs::copy_file(dir.file("step-000000002.hsckpt"), dir.file("step-000000003.hsckpt"));
  const std::optional<LoadedCheckpoint> loaded = load_latest(dir.path());
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->checkpoint.step, 2u);
  ASSERT_EQ(loaded->rejected.size(), 1u);
  EXPECT_EQ(loaded->rejected[0].code, Errc::kCheckpoint);
  EXPECT_NE(loaded->rejected[0].reason.find("file name says step 3"), std::string::npos);
  // Under any other name the file loads.
  fs::rename(dir.file("step-000000003.hsckpt"), dir.file("copy.hsckpt"));
  EXPECT_EQ(load_checkpoint(dir.file("copy.hsckpt")).step, 2u);
}

TEST(CheckpointDirTest, KeepsTheLastN) {
  TempDir dir;
  std::mt19937_64 rng(36);
  {
    CheckpointWriter writer(dir.path());  // keep_last 3 by default
    for (uint64_t step = 10; step <= 60; step += 10)
      writer.write(random_checkpoint(rng, step, 1, 10));
    EXPECT_EQ(list_names(dir.path()), names({40, 50, 60}));
  }
  WriterOptions one;
  one.keep_last = 1;
  CheckpointWriter writer(dir.path(), one);
  writer.write(random_checkpoint(rng, 70, 1, 10));
  EXPECT_EQ(list_names(dir.path()), names({70}));
}

TEST(CheckpointDirTest, ResumingFromAnOlderCheckpointDropsTheNewerOnes) {
  TempDir dir;
  std::mt19937_64 rng(37);
  {
    CheckpointWriter writer(dir.path());
    for (uint64_t step = 1; step <= 5; ++step) writer.write(random_checkpoint(rng, step, 1, 10));
  }
  EXPECT_EQ(list_names(dir.path()), names({3, 4, 5}));
  // Step 5 is damaged: a resumed run continues from 4 and writes step 5 again.
  test::write_bytes(dir.file("step-000000005.hsckpt"), std::vector<std::byte>(100));
  const auto loaded = load_latest(dir.path());
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->checkpoint.step, 4u);
  CheckpointWriter writer(dir.path());
  Checkpoint next = random_checkpoint(rng, 5, 1, 10);
  writer.write(next);
  EXPECT_EQ(list_names(dir.path()), names({3, 4, 5}));
  EXPECT_TRUE(bit_identical(load_latest(dir.path())->checkpoint, next));
  // A run that goes back to step 3 leaves no step 4 or 5 to be mistaken for its own.
  writer.write(random_checkpoint(rng, 3, 1, 10));
  EXPECT_EQ(list_names(dir.path()), names({3}));
}

TEST(CheckpointDirTest, OneWriterPerDirectory) {
  TempDir dir;
  auto first = std::make_unique<CheckpointWriter>(dir.path());
  try {
    CheckpointWriter second(dir.path());
    FAIL() << "two writers in one directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kCheckpoint);
    EXPECT_NE(std::string(e.what()).find(dir.path()), std::string::npos);
  }
  first.reset();
  EXPECT_NO_THROW(CheckpointWriter(dir.path()));
}

TEST(CheckpointDirTest, WriterRemovesStaleTemporaries) {
  TempDir dir;
  test::write_bytes(dir.file(".tmp-step-000000001.hsckpt.99.0"), std::vector<std::byte>(10));
  CheckpointWriter writer(dir.path());
  EXPECT_EQ(list_names(dir.path()), names({}));
}

// A checkpoint folder another user can write to: names planted where the writer's
// temporaries used to go (.tmp-NAME.PID.COUNTER, predictable) neither block the write nor
// receive it, and a symlink at the lock's name is refused, not followed.
TEST(CheckpointDirTest, PlantedNamesNeitherBlockNorReceiveTheWrite) {
  TempDir dir, elsewhere;
  const std::string victim = elsewhere.file("victim");
  hsring::testing::make_victim(victim);
  std::mt19937_64 rng(37);
  CheckpointWriter writer(dir.path());  // removes stale temporaries: plant after it
  const std::string name = checkpoint_file_name(1);
  for (int counter = 0; counter < 1000; ++counter)
    hsring::testing::plant_symlink(
        dir.file(".tmp-" + name + "." + std::to_string(::getpid()) + "." + std::to_string(counter)),
        victim);
  writer.write(random_checkpoint(rng, 1, 1, 10));
  EXPECT_TRUE(hsring::testing::victim_untouched(victim));
  EXPECT_EQ(load_latest(dir.path())->checkpoint.step, 1u);
}

TEST(CheckpointDirTest, SymlinkAtTheLockIsRefused) {
  TempDir dir, elsewhere;
  const std::string target = elsewhere.file("created-by-root");
  hsring::testing::plant_symlink(dir.file(kLockFileName), target);
  try {
    CheckpointWriter writer(dir.path());
    FAIL() << "a symlinked lock was followed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kCheckpoint);
    EXPECT_NE(std::string(e.what()).find("symlink"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(target));
}

// A folder named like a newer step file was taken for a checkpoint: the rotation tried to
// unlink it after every write, failed, and so did every checkpoint of the run (issue 33).
TEST(CheckpointDirTest, AFolderNamedLikeAStepFileIsNoCheckpoint) {
  TempDir dir;
  std::mt19937_64 rng(38);
  fs::create_directories(dir.file(checkpoint_file_name(99) + "/inside"));
  CheckpointWriter writer(dir.path());
  for (uint64_t step = 1; step <= 5; ++step) writer.write(random_checkpoint(rng, step, 1, 10));
  EXPECT_EQ(load_latest(dir.path())->checkpoint.step, 5u);
  std::vector<std::string> expected = names({3, 4, 5});
  expected.push_back(checkpoint_file_name(99));
  std::sort(expected.begin(), expected.end());
  std::vector<std::string> listed = list_names(dir.path());
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(listed, expected);
}

// A FIFO named like the newest step file blocked open() forever, and with it the drafter's
// resume (issue 33): it is a rejected checkpoint, named, and the previous one is loaded.
TEST(CheckpointDirTest, AFifoNamedLikeAStepFileIsRejectedWithoutBlocking) {
  const hsring::testing::HangGuard guard;
  TempDir dir;
  std::mt19937_64 rng(39);
  {
    CheckpointWriter writer(dir.path());
    writer.write(random_checkpoint(rng, 4, 1, 10));
  }
  const std::string fifo = dir.file(checkpoint_file_name(7));
  hsring::testing::plant_fifo(fifo);
  const std::optional<LoadedCheckpoint> loaded = load_latest(dir.path());
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->checkpoint.step, 4u);
  ASSERT_EQ(loaded->rejected.size(), 1u);
  EXPECT_EQ(loaded->rejected[0].path, fifo);
  EXPECT_EQ(loaded->rejected[0].code, Errc::kCheckpoint);
  EXPECT_NE(loaded->rejected[0].reason.find("a FIFO (named pipe), not a regular file"),
            std::string::npos)
      << loaded->rejected[0].reason;
  EXPECT_THROW(load_checkpoint(fifo), Error);
}

TEST(CheckpointDirTest, AFifoAtTheLockIsRefusedWithoutBlocking) {
  const hsring::testing::HangGuard guard;
  TempDir dir;
  hsring::testing::plant_fifo(dir.file(kLockFileName));
  try {
    CheckpointWriter writer(dir.path());
    FAIL() << "locked a FIFO";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kCheckpoint);
    EXPECT_NE(std::string(e.what()).find("a FIFO (named pipe), not a regular file"),
              std::string::npos)
        << e.what();
  }
}

TEST(CheckpointDirTest, CreatesTheDirectory) {
  TempDir dir;
  CheckpointWriter writer(dir.file("a/b"));
  writer.write(Checkpoint{});
  EXPECT_EQ(load_latest(dir.file("a/b"))->checkpoint.step, 0u);
}

// A file size limit makes writes fail with EFBIG, as a full disk makes them fail with
// ENOSPC: the same path through the writer, and no root needed.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = signal(SIGXFSZ, SIG_IGN);  // else the kernel kills us at the limit
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit saved_{};
  sighandler_t old_handler_;
};

TEST_P(CheckpointWriterTest, FullDiskKeepsThePreviousCheckpoint) {
  TempDir dir;
  std::mt19937_64 rng(38);
  const Checkpoint previous = random_checkpoint(rng, 1, 2, 100);
  CheckpointWriter writer(dir.path(), options());
  writer.write(previous);
  Checkpoint big = random_checkpoint(rng, 2, 2, 100);
  big.tensors.push_back({"big", {300000}, std::vector<float>(300000, 1.5f)});  // 1.2 MB
  try {
    FileSizeLimit limit(256 << 10);
    writer.write(big);
    FAIL() << "wrote past the file size limit";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kCheckpoint) << e.what();
    const std::string what = e.what();
    EXPECT_EQ(e.path(), dir.path());
    EXPECT_NE(what.find("File too large"), std::string::npos) << what;
    EXPECT_NE(what.find("needs " + std::to_string(encode_checkpoint(big).size()) + " bytes"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("free"), std::string::npos) << what;
  }
  EXPECT_EQ(list_names(dir.path()), names({1}));  // no temporary left
  const auto loaded = load_latest(dir.path());
  ASSERT_TRUE(loaded);
  EXPECT_TRUE(bit_identical(loaded->checkpoint, previous));
  // With room again, the same writer goes on.
  writer.write(big);
  EXPECT_TRUE(bit_identical(load_latest(dir.path())->checkpoint, big));
}

}  // namespace
}  // namespace hsring::checkpoint
