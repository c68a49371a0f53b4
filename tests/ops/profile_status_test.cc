// What operators read while a run goes on: the workers' profile lines (--profile-interval
// and HSRING_PROFILE_INTERVAL, with clear errors for bad values), `hsring status` with
// stage timings over the last interval, and the worker log prefix (role, index, GPU,
// epoch).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <signal.h>

#include <regex>
#include <sstream>
#include <thread>

#include "shm/ring.h"
#include "tests/crash/process_util.h"
#include "worker/worker_main.h"

namespace hsring {
namespace {

using crash::Millis;

// A small, quick run of `seconds` on `ring`, worker logs in `log_dir`.
std::vector<std::string> run_argv(const std::string& ring, const std::string& seconds,
                                  const std::string& log_dir) {
  return {crash::bin_dir() + "/hsring",
          "run",
          "--ring",
          ring,
          "--model",
          "synthetic",
          "--seconds",
          seconds,
          "--quiet",
          "--slots",
          "8",
          "--max-tokens",
          "64",
          "--hidden-size",
          "32",
          "--log-dir",
          log_dir};
}

std::vector<std::string> lines_with(const std::string& text, const std::string& needle) {
  std::vector<std::string> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (line.find(needle) != std::string::npos) out.push_back(line);
  return out;
}

std::vector<std::string> with_env(const std::string& assignment, std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"/usr/bin/env", assignment});
  return argv;
}

TEST(WorkerLogPrefix, NamesRoleIndexGpuAndEpoch) {
  EXPECT_EQ(worker_log_prefix(Role::kTarget, 0, 3, 2), "target 0 gpu 3 epoch 2");
  EXPECT_EQ(worker_log_prefix(Role::kDrafter, 1, -1, 4), "drafter 1 epoch 4");
  EXPECT_EQ(worker_log_prefix(Role::kTarget, 2, 0, 0), "target 2 gpu 0");
}

TEST(WorkerLogPrefix, AWorkerOnAGpuSaysWhichOnEveryLine) {
  // GPU 1000 exists nowhere: the worker refuses it (or, without CUDA, --gpu at all) after
  // attaching, so its error line carries the whole prefix.
  const std::string ring = crash::unique_ring_name();
  RingShape shape;
  for (uint32_t k = 0; k < shape.num_layers; ++k) shape.layer_ids[k] = int32_t(k);
  Ring::create(ring, shape);
  const auto r = crash::run_command(
      {crash::bin_dir() + "/hsring-target", "--ring", ring, "--index", "1", "--gpu", "1000"});
  Ring::remove(ring);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("[target 1 gpu 1000 epoch 1] error: "), std::string::npos) << r.err;
}

TEST(ProfileLog, EveryWorkerLogsItsStagesEachInterval) {
  crash::TempDir dir;
  const std::string ring = crash::unique_ring_name();
  std::vector<std::string> argv = run_argv(ring, "2.5", dir.file("logs"));
  argv.insert(argv.end(), {"--profile-interval", "0.5"});
  const auto run = crash::run_command(argv, Millis(60000));
  ASSERT_EQ(run.exit_code, 0) << run.err;

  // "[target 0 epoch 1] profile 0.5 s: target.forward count=N mean_ms=X p50_ms=Y p99_ms=Z; ..."
  const std::regex stage(
      R"(([a-z_]+\.[a-z_0-9]+) count=(\d+) mean_ms=[0-9.]+ p50_ms=([0-9.]+) p99_ms=([0-9.]+))");
  for (const char* worker : {"target-0", "target-1", "drafter-0"}) {
    const std::string log = crash::read_file(dir.file(std::string("logs/") + worker + ".log"));
    std::string prefix = std::string("[") + worker + " epoch 1] profile ";
    prefix[prefix.find('-')] = ' ';
    const std::vector<std::string> profiles = lines_with(log, "] profile ");
    // About 4 in 2.5 s; a loaded machine may lose one to start-up or drain.
    EXPECT_GE(profiles.size(), 2u) << log;
    EXPECT_LE(profiles.size(), 6u) << log;
    for (const std::string& line : profiles) {
      EXPECT_EQ(line.rfind(prefix, 0), 0u) << line;
      const std::string kind = worker[0] == 't' ? "target." : "drafter.";
      int stages = 0;
      for (std::sregex_iterator it(line.begin(), line.end(), stage), end; it != end; ++it) {
        EXPECT_EQ((*it)[1].str().rfind(kind, 0), 0u) << line;
        EXPECT_GT(std::stoull((*it)[2].str()), 0u) << line;
        EXPECT_LE(std::stod((*it)[3].str()), std::stod((*it)[4].str())) << "p50 > p99: " << line;
        ++stages;
      }
      EXPECT_GE(stages, 1) << line;
    }
  }
}

TEST(ProfileLog, EnvironmentVariableAppliesWhenTheFlagIsAbsent) {
  crash::TempDir dir;
  const auto by_env =
      crash::run_command(with_env("HSRING_PROFILE_INTERVAL=0.5",
                                  run_argv(crash::unique_ring_name(), "1.5", dir.file("a"))),
                         Millis(60000));
  ASSERT_EQ(by_env.exit_code, 0) << by_env.err;
  EXPECT_FALSE(lines_with(crash::read_file(dir.file("a/drafter-0.log")), "] profile ").empty());

  // The flag wins, also when it turns the log off.
  std::vector<std::string> argv = run_argv(crash::unique_ring_name(), "1.5", dir.file("b"));
  argv.insert(argv.end(), {"--profile-interval", "0"});
  const auto off = crash::run_command(with_env("HSRING_PROFILE_INTERVAL=0.5", argv), Millis(60000));
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_TRUE(lines_with(crash::read_file(dir.file("b/drafter-0.log")), "] profile ").empty());
}

TEST(ProfileLog, BadValuesAreClearErrorsBeforeAnythingStarts) {
  crash::TempDir dir;
  const std::string ring = crash::unique_ring_name();
  const auto env = crash::run_command(
      with_env("HSRING_PROFILE_INTERVAL=soon", run_argv(ring, "1", dir.file("logs"))));
  EXPECT_EQ(env.exit_code, 2);
  EXPECT_NE(env.err.find("HSRING_PROFILE_INTERVAL 'soon' is not a profile interval: give 0 (off) "
                         "or seconds from 0.1 to 86400"),
            std::string::npos)
      << env.err;
  EXPECT_FALSE(crash::segment_exists(ring));

  std::vector<std::string> argv = run_argv(ring, "1", dir.file("logs"));
  argv.insert(argv.end(), {"--profile-interval", "-1"});
  const auto flag = crash::run_command(argv);
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_NE(flag.err.find("--profile-interval"), std::string::npos) << flag.err;
  EXPECT_NE(flag.err.find("'-1' is not a profile interval"), std::string::npos) << flag.err;

  // The workers check the same, before they attach to any ring.
  const auto worker = crash::run_command(
      with_env("HSRING_PROFILE_INTERVAL=0.01",
               {crash::bin_dir() + "/hsring-drafter", "--ring", "no-such-ring", "--index", "0"}));
  EXPECT_EQ(worker.exit_code, 2);
  EXPECT_NE(worker.err.find("[drafter 0] error: HSRING_PROFILE_INTERVAL '0.01' is not a profile "
                            "interval"),
            std::string::npos)
      << worker.err;
  const auto worker_flag =
      crash::run_command({crash::bin_dir() + "/hsring-target", "--ring", "no-such-ring", "--index",
                          "0", "--profile-interval", "x"});
  EXPECT_EQ(worker_flag.exit_code, 2);
  EXPECT_NE(worker_flag.err.find("'x' is not a profile interval"), std::string::npos)
      << worker_flag.err;
}

TEST(Status, StageTimingsCoverTheLastInterval) {
  crash::TempDir dir;
  const std::string ring = crash::unique_ring_name();
  crash::Spawned run(run_argv(ring, "8", dir.file("logs")), dir.file("run.out"),
                     dir.file("run.err"));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!crash::segment_exists(ring) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(Millis(20));
  std::this_thread::sleep_for(Millis(500));  // workers running

  const auto text = crash::run_command(
      {crash::bin_dir() + "/hsring", "status", "--ring", ring, "--interval", "0.5"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("stage timings over the last 0.5 s"), std::string::npos) << text.out;
  const std::regex row(
      R"(drafter 0\s+cpu\s+drafter\.claim_wait\s+(\d+)\s+[0-9.]+\s+([0-9.]+)\s+([0-9.]+))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text.out, m, row)) << text.out;
  EXPECT_GT(std::stoull(m[1].str()), 0u);
  EXPECT_LE(std::stod(m[2].str()), std::stod(m[3].str())) << text.out;

  const auto json = crash::run_command(
      {crash::bin_dir() + "/hsring", "status", "--ring", ring, "--json", "--interval", "0.3"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_TRUE(std::regex_search(json.out, std::regex(R"("interval_s": 0\.3\d*,)"))) << json.out;
  EXPECT_TRUE(std::regex_search(
      json.out,
      std::regex(
          R"("drafter\.claim_wait": \{"count": [1-9]\d*, "mean_ms": [0-9.]+, "p50_ms": [0-9.]+, "p99_ms": [0-9.]+, "count_total": \d+\})")))
      << json.out;

  // Each worker's busy share is its work stages' time over the interval (is_work_stage): the
  // same number as the stage rows it is made of, within their rounding.
  const nlohmann::json doc = nlohmann::json::parse(json.out);
  const double interval_ms = doc.at("interval_s").get<double>() * 1e3;
  bool drafter_worked = false;
  for (const nlohmann::json& process : doc.at("processes")) {
    ASSERT_TRUE(process.at("busy").is_number()) << process.dump();
    const double busy = process.at("busy").get<double>();
    double work_ms = 0;
    for (const char* stage :
         {"target.forward", "drafter.h2d", "drafter.noise", "drafter.verify", "drafter.step"})
      if (process.at("stages").contains(stage) && process["stages"][stage]["count"] > 0)
        work_ms += process["stages"][stage]["count"].get<double>() *
                   process["stages"][stage]["mean_ms"].get<double>();
    EXPECT_NEAR(busy, std::min(1.0, work_ms / interval_ms), 0.01) << process.dump();
    EXPECT_GE(busy, 0.0);
    EXPECT_LE(busy, 1.0);
    drafter_worked |= process.at("role") == "drafter" && busy > 0;
  }
  EXPECT_TRUE(drafter_worked) << json.out;
  const std::regex busy_column(R"(drafter 0 .* (0\.\d\d|1\.00)\s+\d+\s+\d+\n)");
  EXPECT_TRUE(std::regex_search(text.out, busy_column)) << text.out;

  // Prometheus keeps the cumulative histograms.
  const auto prom =
      crash::run_command({crash::bin_dir() + "/hsring", "status", "--ring", ring, "--prometheus"});
  EXPECT_NE(prom.out.find("hsring_stage_duration_seconds_bucket{"), std::string::npos) << prom.out;

  // `ring inspect` has no interval: everything since the ring was created.
  const auto inspect = crash::run_command({crash::bin_dir() + "/hsring", "ring", "inspect", ring});
  EXPECT_NE(inspect.out.find("stage timings since the ring was created"), std::string::npos)
      << inspect.out;
  // Without an interval there is no busy share to show.
  EXPECT_TRUE(std::regex_search(inspect.out, std::regex(R"(drafter 0 .* -\s+\d+\s+\d+\n)")))
      << inspect.out;

  run.signal(SIGTERM);
  const std::optional<int> status = run.wait(Millis(30000));
  ASSERT_TRUE(status);
}

TEST(Status, IntervalMustBeSensible) {
  const auto r = crash::run_command(
      {crash::bin_dir() + "/hsring", "status", "--ring", "x", "--interval", "5000"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--interval"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace hsring
