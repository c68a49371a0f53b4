// Input checked before anything starts, and runs that fail their work failing loudly:
// non-finite flag and config values refused naming the flag or the key and line; a shard
// whose tokens were flipped refused by `hsring run`'s preflight naming the shard and the
// token; a run whose drafters consumed nothing, and a run whose loss turned NaN, exiting
// non-zero with the reason (the batch and the step for the NaN).
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <regex>
#include <sstream>

#include "common/cli_checks.h"
#include "data/shard_file.h"
#include "data/shard_writer.h"
#include "shm/ring.h"
#include "tests/common/special_files.h"
#include "tests/crash/process_util.h"

namespace hsring {
namespace {

using crash::Millis;

std::string bin(const std::string& program) { return crash::bin_dir() + "/" + program; }

// The launcher's exit codes these tests expect (launcher/supervisor.h).
constexpr int kUsage = 2;
constexpr int kNothingConsumed = 5;
constexpr int kNonFinite = 6;

class RingCleanup {
 public:
  RingCleanup() : name_(crash::unique_ring_name()) { Ring::remove(name_); }
  ~RingCleanup() { Ring::remove(name_); }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

TEST(NonFiniteFlags, EveryFloatingFlagRefusesNanAndInfinityNamingTheFlag) {
  RingCleanup ring;
  const struct {
    std::vector<std::string> argv;
    std::string message;
  } cases[] = {
      {{bin("hsring"), "run", "--ring", ring.name(), "--lr", "nan"},
       "--lr: 'nan' is not a finite number"},
      {{bin("hsring"), "run", "--ring", ring.name(), "--seconds", "nan"}, "--seconds: 'nan'"},
      {{bin("hsring"), "run", "--ring", ring.name(), "--min-lr", "inf"}, "--min-lr: 'inf'"},
      {{bin("hsring"), "run", "--ring", ring.name(), "--restart-window", "1e999"},
       "--restart-window: '1e999'"},
      {{bin("hsring"), "run", "--ring", ring.name(), "--target-rate", "-nan"},
       "--target-rate: '-nan'"},
      {{bin("hsring"), "run", "--ring", ring.name(), "--noise-std", "NaN"}, "--noise-std: 'NaN'"},
      {{bin("hsring"), "run", "--ring", ring.name(), "--hang-timeout", "inf"},
       "--hang-timeout: 'inf'"},
      {{bin("hsring"), "status", "--ring", ring.name(), "--interval", "nan"}, "--interval: 'nan'"},
      {{bin("hsring-drafter"), "--ring", ring.name(), "--index", "0", "--lr", "nan"},
       "--lr: 'nan'"},
      {{bin("hsring-drafter"), "--ring", ring.name(), "--index", "0", "--step-ms", "inf"},
       "--step-ms: 'inf'"},
      {{bin("hsring-target"), "--ring", ring.name(), "--index", "0", "--rate", "nan"},
       "--rate: 'nan'"},
  };
  for (const auto& c : cases) {
    const auto r = crash::run_command(c.argv);
    EXPECT_EQ(r.exit_code, kUsage) << c.message << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }
  EXPECT_FALSE(crash::segment_exists(ring.name()));
}

class ConfigFile : public ::testing::Test {
 protected:
  // `hsring --config FILE run` on a file of `lines` (after "[run]"), for a ring of this test.
  crash::CommandResult run_with_config(const std::string& lines) {
    {
      std::ofstream out(dir_.file("hsring.conf"));
      out << "# a test config\n[run]\n" << lines;
    }
    return crash::run_command({bin("hsring"), "--config", dir_.file("hsring.conf"), "run", "--ring",
                               ring_.name(), "--model", "synthetic", "--batches", "10"});
  }

  crash::TempDir dir_;
  RingCleanup ring_;
};

TEST_F(ConfigFile, ABooleanKeyTakesOnlyABoolean) {
  const auto r = run_with_config("quiet=true\nkeep-ring=7\n");
  EXPECT_EQ(r.exit_code, kUsage) << r.err;
  EXPECT_NE(r.err.find("line 4: key 'keep-ring': '7' is not a boolean: give true or false"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(dir_.file("hsring.conf")), std::string::npos) << r.err;
  EXPECT_FALSE(crash::segment_exists(ring_.name()));
}

TEST_F(ConfigFile, AnUnterminatedStringIsRefusedWithItsLine) {
  const auto r = run_with_config("slots=8\nlog-dir=\"/tmp/x\n");
  EXPECT_EQ(r.exit_code, kUsage) << r.err;
  EXPECT_NE(r.err.find("line 4: key 'log-dir': the string has no closing \""), std::string::npos)
      << r.err;
  EXPECT_FALSE(crash::segment_exists(ring_.name()));
}

// A config file that is a FIFO blocked CLI11's open() forever; a folder got CLI11's own
// message without the reason (issue 33).
TEST_F(ConfigFile, AFifoOrAFolderIsRefusedNamingWhatItIs) {
  const hsring::testing::HangGuard guard;
  const std::string conf = dir_.file("fifo.conf");
  hsring::testing::plant_fifo(conf);
  for (const std::string& path : {conf, dir_.path()}) {
    const auto r = crash::run_command(
        {bin("hsring"), "--config", path, "run", "--ring", ring_.name(), "--batches", "1"});
    EXPECT_EQ(r.exit_code, kUsage) << r.err;
    EXPECT_NE(r.err.find("config file " + path +
                         ": cannot open: " + (path == conf ? "a FIFO (named pipe)" : "a folder") +
                         ", not a regular file"),
              std::string::npos)
        << r.err;
  }
  EXPECT_FALSE(crash::segment_exists(ring_.name()));
}

// CLI11 let the first of two [run] sections or keys win silently, cut a value at a NUL, and
// refused a bare key or a value out of range without the file and line (issue 33).
TEST_F(ConfigFile, ATwiceGivenSectionOrKeyABareKeyAndANulAreRefusedWithTheirLine) {
  const struct {
    std::string lines;
    std::string message;
  } cases[] = {
      {"slots=8\n[run]\nslots=9\n", "line 4: the section [run] again (first at line 2)"},
      {"slots=8\nslots=9\n", "line 4: key 'slots' again (first at line 3)"},
      {"slots\n", "line 3: key 'slots': Value true not in range 2 to 4096"},
      {"slots=1\n", "line 3: key 'slots': Value 1 not in range 2 to 4096"},
      {"bogus=1\n", "line 3: unknown key 'bogus'"},
      {std::string("ring=\"a\0b\"\n", 11), "line 3: a NUL byte"},
  };
  for (const auto& c : cases) {
    const auto r = run_with_config(c.lines);
    EXPECT_EQ(r.exit_code, kUsage) << r.err;
    EXPECT_NE(r.err.find("config file " + dir_.file("hsring.conf") + " " + c.message),
              std::string::npos)
        << r.err;
  }
  EXPECT_FALSE(crash::segment_exists(ring_.name()));
}

// Windows editors start a file with a UTF-8 byte order mark; CLI11 refused the first line.
TEST_F(ConfigFile, AByteOrderMarkIsSkipped) {
  {
    std::ofstream out(dir_.file("bom.conf"));
    out << "\xEF\xBB\xBF[run]\nslots=bogus\n";
  }
  const auto r = crash::run_command(
      {bin("hsring"), "--config", dir_.file("bom.conf"), "run", "--ring", ring_.name()});
  EXPECT_EQ(r.exit_code, kUsage) << r.err;
  // The section was read: the error is about the key's value, not the first line.
  EXPECT_NE(r.err.find("slots"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("section"), std::string::npos) << r.err;
}

TEST_F(ConfigFile, ANonFiniteValueIsRefusedNamingTheKey) {
  const auto r = run_with_config("lr=nan\n");
  EXPECT_EQ(r.exit_code, kUsage) << r.err;
  EXPECT_NE(r.err.find("line 3: key 'lr': 'nan' is not a finite number"), std::string::npos)
      << r.err;
}

TEST_F(ConfigFile, OtherMalformedLinesAreRefused) {
  EXPECT_NE(
      config_text_problem("[run\nslots=4\n").find("line 1: the section '[run' has no closing ']'"),
      std::string::npos);
  EXPECT_NE(config_text_problem("[run]\nlayers=[1,2\n").find("line 2: key 'layers': the array"),
            std::string::npos);
  EXPECT_NE(config_text_problem("[run]\nring=\"a\" b\n").find("text after the closing quote"),
            std::string::npos);
  EXPECT_NE(config_text_problem("[run]\nring=a\"b\n").find("a quote inside an unquoted value"),
            std::string::npos);
  EXPECT_NE(config_text_problem("[run]\nring=\"a#b\"\n").find("'#' inside quotes"),
            std::string::npos);
  EXPECT_NE(config_text_problem("[run]\nring=\"\"\"a\n").find("multi-line strings"),
            std::string::npos);
  EXPECT_EQ(config_text_problem("[run]\nring=\"a \\\"b\\\" c\"  # ok\nslots = 8\nquiet\n"), "");
}

// Property: whatever bytes a config file holds (random, or the default config cut or
// mutated anywhere), the checks and CLI11's reader after them return or throw
// CLI::ConfigError with a line; nothing else escapes, nothing crashes.
TEST_F(ConfigFile, RandomAndMutatedFilesGiveAnErrorNeverACrash) {
  const auto r = crash::run_command({bin("hsring"), "config", "default"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string good = r.out;
  std::mt19937_64 rng(33);
  const auto read = [](const std::string& text) {
    CheckedConfig checked("fuzz.conf");
    std::istringstream in(text);
    try {
      (void)checked.from_config(in);
    } catch (const CLI::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("fuzz.conf"), std::string::npos) << e.what();
    } catch (const CLI::ParseError&) {  // CLI11's own refusal of what passed the checks
    }
  };
  for (int round = 0; round < 2000; ++round) {
    std::string text;
    switch (round % 4) {
      case 0:  // random bytes
        text.resize(rng() % 200);
        for (char& c : text) c = char(rng());
        break;
      case 1:  // the default config cut anywhere
        text = good.substr(0, rng() % (good.size() + 1));
        break;
      case 2: {  // a few bytes of it changed
        text = good;
        for (int k = 0; k < 4; ++k) text[rng() % text.size()] = char(rng());
        break;
      }
      default: {  // a config-looking line of random printable characters
        static const std::string alphabet = "[]=\"'#\\ \tabcrun0123456789.-\n\r\xEF\xBB\xBF";
        text = "[run]\n";
        for (size_t k = rng() % 60; k > 0; --k) text += alphabet[rng() % alphabet.size()];
      }
    }
    SCOPED_TRACE(::testing::PrintToString(text));
    read(text);
    (void)config_text_problem(text);
  }
}

TEST_F(ConfigFile, TheDefaultConfigPassesTheChecks) {
  const auto r = crash::run_command({bin("hsring"), "config", "default"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(config_text_problem(r.out), "") << r.out;
}

// A folder with one shard of 2-byte tokens in a vocabulary of 200 (the tiny model has
// 256), every token known.
class CorruptShard : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_.file("data"));
    shard_ = dir_.file("data/part-0000.hstok");
    data::ShardWriter writer(shard_, 2, 200);
    std::mt19937 rng(7);
    for (int d = 0; d < 24; ++d) {
      std::vector<uint32_t> doc(120);
      for (uint32_t& t : doc) t = rng() % 200;
      writer.add_document(doc);
    }
    writer.finish();
  }

  // Overwrites token `index` of the shard with `value` (by default another token of the
  // vocabulary), leaving its checksum as it was.
  void set_token(uint64_t index, std::optional<uint16_t> value = std::nullopt) {
    const data::ShardInfo info = data::read_shard_info(shard_);
    std::fstream file(shard_, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = std::streamoff(info.header.tokens_offset() + 2 * index);
    uint16_t token = 0;
    file.seekg(at);
    file.read(reinterpret_cast<char*>(&token), 2);
    token = value.value_or(uint16_t((token + 1) % 200));
    file.seekp(at);
    file.write(reinterpret_cast<const char*>(&token), 2);
  }

  crash::CommandResult run(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {bin("hsring"), "run",
                                     "--ring",      ring_.name(),
                                     "--model",     "tiny",
                                     "--data",      dir_.file("data"),
                                     "--run-dir",   dir_.file("run"),
                                     "--quiet",     "--batches",
                                     "2",           "--max-tokens",
                                     "128",         "--no-eval"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return crash::run_command(argv, Millis(60000));
  }

  crash::TempDir dir_;
  RingCleanup ring_;
  std::string shard_;
};

TEST_F(CorruptShard, AFlippedTokenIsRefusedBeforeTheRunStarts) {
  set_token(1000);  // still in the vocabulary: only the checksum knows
  const auto r = run();
  EXPECT_EQ(r.exit_code, kUsage) << r.err;
  EXPECT_NE(r.err.find(shard_), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("token checksum mismatch"), std::string::npos) << r.err;
  EXPECT_FALSE(crash::segment_exists(ring_.name()));
  EXPECT_EQ(r.err.find("ring '"), std::string::npos) << "the run started:\n" << r.err;

  // The explicit opt-out skips the read (token values are still range-checked per batch).
  const auto skipped = run({"--no-verify-data"});
  EXPECT_EQ(skipped.exit_code, 0) << skipped.err;
  // --no-eval (run() gives it): the run ends at its export, without decoding it.
  EXPECT_NE(skipped.err.find("exported the DFlash drafter"), std::string::npos) << skipped.err;
  EXPECT_EQ(skipped.err.find("evaluating the exported drafter"), std::string::npos) << skipped.err;
}

// Found by the target mid-run (the preflight's read skipped): the run stops with 2 at once,
// no restart of the target into the same token.
TEST_F(CorruptShard, AnOutOfVocabularyTokenFoundByATargetStopsTheRunWithoutRestarts) {
  set_token(700, 60000);
  const auto r = crash::run_command(
      {bin("hsring"), "run", "--ring", ring_.name(), "--model", "tiny", "--data", dir_.file("data"),
       "--run-dir", dir_.file("run"), "--quiet", "--batches", "200", "--max-tokens", "128",
       "--no-verify-data", "--max-restarts", "1000"},
      Millis(60000));
  EXPECT_EQ(r.exit_code, kUsage) << r.err;
  EXPECT_NE(r.err.find("token 60000 is outside the vocabulary"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exited 2, an error a restart cannot fix"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("restarting in"), std::string::npos) << r.err;
  EXPECT_FALSE(crash::segment_exists(ring_.name()));
}

TEST_F(CorruptShard, AnOutOfVocabularyTokenIsNamedWithItsShard) {
  set_token(700, 60000);
  const auto r = run();
  EXPECT_EQ(r.exit_code, kUsage) << r.err;
  EXPECT_NE(r.err.find(shard_), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("token 60000 is outside the vocabulary of 200"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  EXPECT_FALSE(crash::segment_exists(ring_.name()));
}

TEST(RunsThatFail, ARunWhoseDraftersConsumeNothingFails) {
  // Every drafter hangs in its first step and is killed as hung (a crash: restarted), the
  // targets run, and no batch is ever consumed.
  RingCleanup ring;
  const auto r =
      crash::run_command({bin("hsring"), "run", "--ring", ring.name(), "--model", "synthetic",
                          "--drafter-step-ms", "60000", "--hang-timeout", "1", "--drain-timeout",
                          "1", "--seconds", "3", "--max-restarts", "1000", "--quiet"},
                         Millis(60000));
  EXPECT_EQ(r.exit_code, kNothingConsumed) << r.err;
  EXPECT_NE(r.err.find("(hung) killed by SIGKILL"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("restarting in"), std::string::npos) << "a crash is restarted:\n" << r.err;
  EXPECT_NE(r.err.find("error: the drafters consumed no batch"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the run did nothing"), std::string::npos) << r.err;
}

// A worker's own classified error (usage, data, model, checkpoint: exit 2) was restarted
// five times and ended the run as a crash loop, exit 3 (issue 33). A restart reads the same
// input: the run stops at once with the worker's class's code, 2.
TEST(RunsThatFail, ACheckpointFolderLockedByAnotherRunEndsItWithTwoWithoutRestarts) {
  crash::TempDir dir;
  RingCleanup ring;
  std::filesystem::create_directories(dir.file("run/checkpoints"));
  const int lock = ::open(dir.file("run/checkpoints/.lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(::flock(lock, LOCK_EX | LOCK_NB), 0);
  const auto started = std::chrono::steady_clock::now();
  const auto r = crash::run_command(
      {bin("hsring"), "run", "--ring", ring.name(), "--model", "tiny", "--run-dir", dir.file("run"),
       "--seconds", "60", "--max-restarts", "1000", "--quiet", "--max-tokens", "128"},
      Millis(60000));
  ::close(lock);
  EXPECT_EQ(r.exit_code, kUsage) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(30))
      << "stopped at the error, not at --seconds";
  EXPECT_NE(r.err.find("drafter 0 exited 2, an error a restart cannot fix"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(".lock"), std::string::npos) << "the drafter's error names the lock\n"
                                                    << r.err;
  EXPECT_EQ(r.err.find("restarting in"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("crash loop"), std::string::npos) << r.err;
  EXPECT_FALSE(crash::segment_exists(ring.name()));
}

// The /dev/shm entries whose names start with `ring`: the ring and its gradient exchange.
std::vector<std::string> shm_entries_of(const std::string& ring) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
    if (entry.path().filename().string().rfind(ring, 0) == 0)
      names.push_back(entry.path().filename().string());
  return names;
}

// A --run-dir that cannot be made (under a file, in a read-only folder) exited 4 and left
// /dev/shm/RING behind, so the next run said "already exists" (issue 33).
TEST(RunsThatFail, ARunFolderThatCannotBeMadeLeavesNoRing) {
  crash::TempDir dir;
  std::ofstream(dir.file("a-file")) << "not a folder";
  std::filesystem::create_directory(dir.file("read-only"));
  ::chmod(dir.file("read-only").c_str(), 0555);
  std::vector<std::string> bad = {dir.file("a-file/run")};
  if (::geteuid() != 0) bad.push_back(dir.file("read-only/run"));  // root writes anyway
  for (const std::string& run_dir : bad) {
    RingCleanup ring;
    ASSERT_TRUE(shm_entries_of(ring.name()).empty());
    const auto r = crash::run_command(
        {bin("hsring"), "run", "--ring", ring.name(), "--model", "tiny", "--run-dir", run_dir,
         "--batches", "4", "--quiet", "--max-tokens", "128"},
        Millis(60000));
    EXPECT_EQ(r.exit_code, 4) << r.err;
    EXPECT_NE(r.err.find(run_dir + ": cannot create the run folder"), std::string::npos) << r.err;
    EXPECT_EQ(shm_entries_of(ring.name()), std::vector<std::string>{}) << run_dir;
  }
  ::chmod(dir.file("read-only").c_str(), 0755);
}

TEST(RunsThatFail, ANanLossEndsTheRunNamingTheBatchAndTheStep) {
  // A learning rate of 1e30 sends the drafter's weights past fp32 within two steps.
  crash::TempDir dir;
  RingCleanup ring;
  const auto r = crash::run_command({bin("hsring"),
                                     "run",
                                     "--ring",
                                     ring.name(),
                                     "--model",
                                     "tiny",
                                     "--run-dir",
                                     dir.file("run"),
                                     "--lr",
                                     "1e30",
                                     "--min-lr",
                                     "0",
                                     "--warmup-steps",
                                     "0",
                                     "--batches",
                                     "40",
                                     "--quiet",
                                     "--max-tokens",
                                     "128",
                                     "--summary-json",
                                     dir.file("summary.json")},
                                    Millis(60000));
  EXPECT_EQ(r.exit_code, kNonFinite) << r.err;
  static const std::regex named(
      "drafter 0 epoch 1\\] error: the loss is (NaN|\\+Inf|-Inf) at step [0-9]+ on batch [0-9]+");
  EXPECT_TRUE(std::regex_search(r.err, named)) << r.err;
  EXPECT_NE(r.err.find("error: drafter 0 stopped training on a loss that is not finite"),
            std::string::npos)
      << r.err;
  // Not restarted into a crash loop.
  EXPECT_EQ(r.err.find("restarting"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("crash loop"), std::string::npos) << r.err;
  EXPECT_NE(crash::read_file(dir.file("summary.json")).find("\"steps\""), std::string::npos);
}

constexpr int kWorkNotSaved = 8;

// With --batches 2 the NaN comes in the last step, and whether the drafter reports it
// before or after the launcher starts draining is a race; it exited 0 when it lost
// (issue 33: a drain's failures are failures too). Several runs, so both orders come up.
TEST(RunsThatFail, ANanLossInTheLastStepsStillFailsTheRun) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    crash::TempDir dir;
    RingCleanup ring;
    const auto r = crash::run_command(
        {bin("hsring"), "run", "--ring", ring.name(), "--model", "tiny", "--run-dir",
         dir.file("run"), "--lr", "1e30", "--min-lr", "0", "--warmup-steps", "0", "--batches", "2",
         "--quiet", "--max-tokens", "128"},
        Millis(60000));
    ASSERT_EQ(r.exit_code, kNonFinite) << "run " << attempt << "\n" << r.err;
    EXPECT_NE(r.err.find("not finite"), std::string::npos) << r.err;
  }
}

// A small tmpfs, mounted for the test: a real full disk under the drafter's final writes.
class SmallDisk {
 public:
  SmallDisk(const std::string& dir, const char* size) : dir_(dir) {
    std::filesystem::create_directories(dir);
    mounted_ =
        ::mount("tmpfs", dir.c_str(), "tmpfs", 0, (std::string("size=") + size).c_str()) == 0;
    if (!mounted_) why_ = std::string("cannot mount a tmpfs: ") + std::strerror(errno);
  }
  ~SmallDisk() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }

 private:
  std::string dir_;
  bool mounted_ = false;
  std::string why_;
};

// A short tiny-model run in `dir` one of whose folders (the checkpoints or the run folder)
// the caller put on a 16 KiB tmpfs: it must fail as work not saved, naming the full disk.
crash::CommandResult run_with_a_full_disk(const crash::TempDir& dir) {
  RingCleanup ring;
  const auto r =
      crash::run_command({bin("hsring"), "run", "--ring", ring.name(), "--model", "tiny",
                          "--run-dir", dir.file("run"), "--checkpoint-dir", dir.file("checkpoints"),
                          "--batches", "4", "--quiet", "--max-tokens", "128"},
                         Millis(60000));
  EXPECT_EQ(r.exit_code, kWorkNotSaved) << r.err;
  EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("error: the run's work is not saved: drafter 0"), std::string::npos)
      << r.err;
  return r;
}

TEST(RunsThatFail, AFullDiskForTheFinalCheckpointFailsTheRun) {
  crash::TempDir dir;
  SmallDisk disk(dir.file("checkpoints"), "16k");
  if (!disk.mounted()) GTEST_SKIP() << disk.why();
  run_with_a_full_disk(dir);
}

TEST(RunsThatFail, AFullDiskForTheExportFailsTheRun) {
  crash::TempDir dir;
  SmallDisk disk(dir.file("run"), "16k");
  if (!disk.mounted()) GTEST_SKIP() << disk.why();
  const auto r = run_with_a_full_disk(dir);
  // Nor is an export evaluated: there is none of this run.
  EXPECT_EQ(r.err.find("evaluating the exported drafter"), std::string::npos) << r.err;
}

// The drafter crashed and waited out its backoff when the run ended (--seconds in the
// issue; here a SIGTERM right after the kill, which drains the same way, so the timing is
// the test's): its steps since the last checkpoint were lost and no final checkpoint or
// export was written, yet the run exited 0 and its summary counted the steps (issue 33).
TEST(RunsThatFail, ADrafterDownWhenTheRunEndsFailsTheRun) {
  crash::TempDir dir;
  RingCleanup ring;
  crash::Spawned run(
      {bin("hsring"), "run", "--ring", ring.name(), "--model", "tiny", "--run-dir", dir.file("run"),
       "--seconds", "60", "--max-restarts", "100", "--max-tokens", "128"},
      dir.file("out"), dir.file("err"));
  // Each kill doubles the backoff (100, 200, 400 ms): the third leaves the drafter down
  // for far longer than the launcher takes to see the SIGTERM that follows it.
  pid_t last = 0;
  for (int kills = 0; kills < 3;) {
    ASSERT_FALSE(run.wait(Millis(20)).has_value()) << run.stderr_text();
    const auto drafter = crash::find_worker(run.pid(), "drafter", 0);
    if (!drafter || drafter->id.pid == last) continue;
    last = drafter->id.pid;
    ::kill(last, SIGKILL);
    if (++kills == 3) run.signal(SIGTERM);
  }
  const auto status = run.wait(Millis(60000));
  ASSERT_TRUE(status.has_value());
  const std::string err = run.stderr_text();
  EXPECT_EQ(WIFEXITED(*status) ? WEXITSTATUS(*status) : -1, kWorkNotSaved) << err;
  // Down in its backoff, or (when the SIGTERM came first) dead and not yet reaped.
  EXPECT_NE(err.find("error: the run's work is not saved: drafter 0"), std::string::npos) << err;
}

// A run that wrote no export evaluated the RUN_DIR/export an earlier run left and printed
// its acceptance length as its own (issue 33). An export names the run that wrote it.
TEST(RunsThatFail, AnEarlierRunsExportIsNeverReportedAsThisRuns) {
  crash::TempDir dir;
  {
    // Trained on a shard of its own, and --no-eval: this run need not spend a minute
    // evaluating its export by speculative decoding.
    std::filesystem::create_directories(dir.file("data"));
    data::ShardWriter writer(dir.file("data/part-0000.hstok"), 2, 200);
    std::mt19937 rng(7);
    for (int d = 0; d < 24; ++d) {
      std::vector<uint32_t> doc(120);
      for (uint32_t& t : doc) t = rng() % 200;
      writer.add_document(doc);
    }
    writer.finish();
    RingCleanup ring;
    const auto first =
        crash::run_command({bin("hsring"), "run", "--ring", ring.name(), "--model", "tiny",
                            "--run-dir", dir.file("first"), "--data", dir.file("data"), "--batches",
                            "4", "--quiet", "--max-tokens", "128", "--no-eval"},
                           Millis(60000));
    ASSERT_EQ(first.exit_code, 0) << first.err;
    ASSERT_TRUE(std::filesystem::exists(dir.file("first/export/config.json"))) << first.err;
  }
  // The second run's folder holds the first run's export, and its drafter never starts
  // (another writer holds its checkpoint folder), so it writes none.
  std::filesystem::create_directories(dir.file("second/checkpoints"));
  std::filesystem::copy(dir.file("first/export"), dir.file("second/export"));
  const int lock = ::open(dir.file("second/checkpoints/.lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(::flock(lock, LOCK_EX | LOCK_NB), 0);
  RingCleanup ring;
  const auto second =
      crash::run_command({bin("hsring"), "run", "--ring", ring.name(), "--model", "tiny",
                          "--run-dir", dir.file("second"), "--seconds", "2", "--max-restarts",
                          "1000", "--quiet", "--max-tokens", "128"},
                         Millis(60000));
  ::close(lock);
  EXPECT_EQ(second.exit_code, kUsage) << second.err;
  EXPECT_EQ(second.err.find("evaluating the exported drafter"), std::string::npos) << second.err;
  EXPECT_EQ(second.err.find("acceptance"), std::string::npos) << second.err;
}

}  // namespace
}  // namespace hsring
