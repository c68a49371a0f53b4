// What `hsring run` leaves for operators: the Prometheus file for node_exporter's textfile
// collector (--metrics-file) and one log per worker (--log-dir); and that none of them can
// be steered by another user into a file of root's (issue 33: planted symlinks and names).
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "tests/common/planted_files.h"
#include "tests/common/special_files.h"
#include "tests/crash/process_util.h"

namespace hsring {
namespace {

using crash::Millis;

TEST(RunOutputs, MetricsFileAndWorkerLogs) {
  crash::TempDir dir;
  const std::string ring = crash::unique_ring_name();
  const auto run = crash::run_command(
      {crash::bin_dir() + "/hsring", "run", "--ring", ring, "--model", "synthetic", "--batches",
       "2000", "--quiet", "--slots", "8", "--max-tokens", "64", "--hidden-size", "32",
       "--metrics-file", dir.file("hsring.prom"), "--log-dir", dir.file("logs")},
      Millis(60000));
  ASSERT_EQ(run.exit_code, 0) << run.err;

  // Written at least once a second while running, atomically (no temporary left behind).
  const std::string metrics = crash::read_file(dir.file("hsring.prom"));
  EXPECT_NE(metrics.find("# TYPE hsring_worker_batches_total counter"), std::string::npos);
  EXPECT_NE(metrics.find("hsring_slots{ring=\"" + ring + "\",state=\"READY\"}"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("hsring_worker_up{ring=\"" + ring + "\",role=\"drafter\",index=\"0\""),
            std::string::npos);
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos) << entry.path();

  // One log per worker, with the worker's prefix on its lines; the launcher's own lines
  // stay on its stderr.
  for (const char* worker : {"target-0", "target-1", "drafter-0"}) {
    const std::string path = dir.file(std::string("logs/") + worker + ".log");
    EXPECT_TRUE(std::filesystem::exists(path)) << path;
  }
  EXPECT_NE(run.err.find("summary:"), std::string::npos);
}

TEST(RunOutputs, UnwritableMetricsFileIsAWarningNotACrash) {
  const std::string ring = crash::unique_ring_name();
  const auto run = crash::run_command(
      {crash::bin_dir() + "/hsring", "run", "--ring", ring, "--model", "synthetic", "--seconds",
       "1.5", "--quiet", "--slots", "8", "--max-tokens", "64", "--hidden-size", "32",
       "--metrics-file", "/nonexistent-dir/hsring.prom"},
      Millis(60000));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("warning: cannot write /nonexistent-dir/hsring.prom"), std::string::npos)
      << run.err;
}

// A short run of `hsring run` with `extra` flags, started through /bin/sh after `plant`
// (shell lines run by the very process that then execs hsring: $$ is hsring's pid).
crash::CommandResult planted_run(const std::string& ring, const std::string& plant,
                                 const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {"/bin/sh",
                                   "-c",
                                   plant + "exec \"$@\"",
                                   "sh",
                                   crash::bin_dir() + "/hsring",
                                   "run",
                                   "--ring",
                                   ring,
                                   "--model",
                                   "synthetic",
                                   "--batches",
                                   "20",
                                   "--quiet",
                                   "--slots",
                                   "8",
                                   "--max-tokens",
                                   "64",
                                   "--hidden-size",
                                   "32"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return crash::run_command(argv, Millis(60000));
}

// The co-tenant's folder: writable by everyone, as /tmp or a textfile collector's folder.
struct SharedFolder {
  crash::TempDir dir;
  std::string victim = dir.file("victim");
  SharedFolder() {
    ::chmod(dir.path().c_str(), 01777);
    testing::make_victim(victim);
  }
};

TEST(RunOutputs, MetricsFileIsNeverWrittenThroughAPlantedSymlink) {
  SharedFolder shared;
  const std::string prom = shared.dir.file("hsring.prom");
  const auto run =
      planted_run(crash::unique_ring_name(), testing::plant_for_exec(prom, shared.victim),
                  {"--metrics-file", prom});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(testing::victim_untouched(shared.victim));
  EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::symlink_status(prom)));
  EXPECT_NE(crash::read_file(prom).find("hsring_worker_up"), std::string::npos);
}

TEST(RunOutputs, SummaryJsonIsNeverWrittenThroughAPlantedSymlink) {
  SharedFolder shared;
  const std::string summary = shared.dir.file("summary.json");
  const std::string other = shared.dir.file("other.json");
  // At the old temporary's name, and at the final name itself.
  const auto run = planted_run(crash::unique_ring_name(),
                               testing::plant_for_exec(summary, shared.victim) + "ln -s '" +
                                   shared.victim + "' '" + other + "'; ",
                               {"--summary-json", other});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(testing::victim_untouched(shared.victim));
  EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::symlink_status(other)));
  EXPECT_TRUE(crash::json_number(crash::read_file(other), "batches_consumed").has_value())
      << crash::read_file(other);
  const auto run2 =
      planted_run(crash::unique_ring_name(), testing::plant_for_exec(summary, shared.victim),
                  {"--summary-json", summary});
  ASSERT_EQ(run2.exit_code, 0) << run2.err;
  EXPECT_TRUE(testing::victim_untouched(shared.victim));
}

// Without --log-dir the user commands' logs went to $TMPDIR/hsring-RING-PID: a co-tenant
// who made that folder first, with target-0.log a symlink, got root's output appended to a
// file of their choice (and could read it). Now the folder is new, random and 0700.
TEST(RunOutputs, UserCommandLogsGoToAFreshPrivateFolder) {
  SharedFolder shared;
  const std::string ring = crash::unique_ring_name();
  const std::string planted = shared.dir.file("hsring-" + ring + "-");
  const std::string plant = "mkdir -m 777 '" + planted + "'$$ && ln -s '" + shared.victim + "' '" +
                            planted + "'$$/target-0.log; ";
  const auto run = planted_run(
      ring, "export TMPDIR='" + shared.dir.path() + "'; " + plant,
      {"--targets", "cpu:1", "--target-cmd",
       "exec " + crash::bin_dir() + "/hsring-target --ring $HSRING_RING --index $HSRING_INDEX"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(testing::victim_untouched(shared.victim));
  const std::string marker = "user command workers log to ";
  const size_t at = run.err.find(marker);
  ASSERT_NE(at, std::string::npos) << run.err;
  const std::string folder = run.err.substr(
      at + marker.size(), run.err.find(' ', at + marker.size()) - at - marker.size());
  EXPECT_EQ(folder.rfind(planted, 0), 0u) << folder;
  struct stat st {};
  ASSERT_EQ(::lstat(folder.c_str(), &st), 0) << folder;
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_TRUE(
      std::filesystem::is_regular_file(std::filesystem::symlink_status(folder + "/target-0.log")));
  std::filesystem::remove_all(folder);
}

TEST(RunOutputs, LogDirOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a folder to another user needs root";
  crash::TempDir dir;
  const std::string logs = dir.file("logs");
  std::filesystem::create_directory(logs);
  ASSERT_EQ(::chown(logs.c_str(), 65534, 65534), 0);
  const std::string ring = crash::unique_ring_name();
  const auto run = planted_run(ring, "", {"--log-dir", logs});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find(logs), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("uid 65534"), std::string::npos) << run.err;
  EXPECT_TRUE(std::filesystem::is_empty(logs));
  EXPECT_FALSE(crash::segment_exists(ring));
}

TEST(RunOutputs, PlantedLogFilesAreRefusedNotFollowed) {
  SharedFolder shared;
  const std::string logs = shared.dir.file("logs");
  std::filesystem::create_directory(logs);
  testing::plant_symlink(logs + "/target-0.log", shared.victim);
  const std::string ring = crash::unique_ring_name();
  const auto run = planted_run(ring, "", {"--log-dir", logs});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("target-0.log"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("symlink"), std::string::npos) << run.err;
  EXPECT_TRUE(testing::victim_untouched(shared.victim));
  EXPECT_FALSE(crash::segment_exists(ring));
  // A hard link to another file would receive the logs too.
  std::filesystem::remove(logs + "/target-0.log");
  std::filesystem::create_hard_link(shared.victim, logs + "/target-0.log");
  const auto linked = planted_run(crash::unique_ring_name(), "", {"--log-dir", logs});
  EXPECT_EQ(linked.exit_code, 2) << linked.err;
  EXPECT_NE(linked.err.find("2 names"), std::string::npos) << linked.err;
  EXPECT_TRUE(testing::victim_untouched(shared.victim));
  // A FIFO with no reader blocked the launcher's open() of the log forever.
  testing::plant_fifo(logs + "/target-0.log");
  const auto fifo = planted_run(crash::unique_ring_name(), "", {"--log-dir", logs});
  EXPECT_EQ(fifo.exit_code, 2) << fifo.err;
  EXPECT_NE(fifo.err.find("target-0.log: worker log: a FIFO (named pipe), not a regular file"),
            std::string::npos)
      << fifo.err;
}

}  // namespace
}  // namespace hsring
