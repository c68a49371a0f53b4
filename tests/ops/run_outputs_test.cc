// What `hsring run` leaves for operators: the Prometheus file for node_exporter's textfile
// collector (--metrics-file) and one log per worker (--log-dir).
#include <filesystem>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace hsring
