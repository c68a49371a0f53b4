// A worker started by hand checks each of the run's flags as `hsring run` does (the one
// flag table, worker/run_flags.h): a value the launcher would refuse ends the worker with
// the usage code, naming the flag, before it touches any ring.
#include <gtest/gtest.h>

#include "tests/crash/process_util.h"
#include "tests/worker/flag_values.h"

namespace hsring {
namespace {

constexpr int kUsage = 2;

std::vector<std::string> worker(const char* program, std::vector<std::string> flags) {
  // No ring of this name exists: a worker that got past its flags would fail to attach (4).
  std::vector<std::string> argv = {crash::bin_dir() + "/" + program, "--ring",
                                   "hsring-flags-test-none", "--index", "0"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return argv;
}

// The drafter once took any --anchors; `hsring run` bounded it.
TEST(WorkerFlags, ADrafterStartedByHandRefusesAnAnchorCountTheLauncherRefuses) {
  const auto r = crash::run_command(worker("hsring-drafter", {"--anchors", "2000000"}));
  EXPECT_EQ(r.exit_code, kUsage) << r.err;
  EXPECT_NE(r.err.find("--anchors"), std::string::npos) << r.err;
  const auto launcher = crash::run_command(
      {crash::bin_dir() + "/hsring", "run", "--model", "synthetic", "--anchors", "2000000"});
  EXPECT_EQ(launcher.exit_code, kUsage) << launcher.err;
}

// --split is checked on every machine, GPUs or none, with --targets given or not.
TEST(WorkerFlags, ABadSplitIsRefusedWithTheUsageCodeNamingTheFlag) {
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{}, std::vector<std::string>{"--targets", "cpu:1"}}) {
    std::vector<std::string> argv = {
        crash::bin_dir() + "/hsring", "run", "--model", "synthetic", "--split", "0:3"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const auto r = crash::run_command(argv);
    EXPECT_EQ(r.exit_code, kUsage) << r.err;
    EXPECT_NE(r.err.find("--split '0:3'"), std::string::npos) << r.err;
  }
}

TEST(WorkerFlags, EveryCheckedFlagGivenByHandIsRefusedWithTheUsageCode) {
  for (const RunFlag& flag : run_flags()) {
    const std::optional<std::string> bad = testing::refused_text(flag);
    if (!bad) continue;
    for (const uint8_t program : {kTargets, kDrafters}) {
      if ((flag.reach & program) == 0) continue;
      const std::string name(flag_name(flag, program));
      const auto r = crash::run_command(worker(
          program == kTargets ? "hsring-target" : "hsring-drafter", testing::given(name, *bad)));
      EXPECT_EQ(r.exit_code, kUsage) << name << " " << *bad << "\n" << r.err;
      EXPECT_NE(r.err.find(name), std::string::npos) << r.err;
    }
  }
}

}  // namespace
}  // namespace hsring
