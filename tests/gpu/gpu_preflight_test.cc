// `hsring run` refuses GPU configurations that cannot work, with one clear message and
// before any worker starts (no segment is left behind, nothing is spawned): a GPU that
// does not exist, a memlock limit below the ring, a ring larger than /dev/shm, a slot
// budget too small for the GPU targets' in-flight batches, a bad noise schedule. Runs in
// every build: with no GPU (or no CUDA) the messages say so.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include "gpu/memlock.h"
#include "tests/crash/process_util.h"

namespace hsring {
namespace {

using crash::CommandResult;

class GpuPreflightTest : public ::testing::Test {
 protected:
  // A ring small enough (< 1 MiB) that the memlock check passes under the 8 MiB default.
  CommandResult run(std::vector<std::string> extra,
                    std::vector<std::string> shape = {"--slots", "4", "--max-tokens", "16",
                                                      "--hidden-size", "64", "--hs-min-ready",
                                                      "1"}) {
    std::vector<std::string> argv = {crash::bin_dir() + "/hsring",
                                     "run",
                                     "--ring",
                                     ring_,
                                     "--model",
                                     "synthetic",
                                     "--batches",
                                     "10",
                                     "-q"};
    argv.insert(argv.end(), shape.begin(), shape.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    CommandResult r = crash::run_command(argv, crash::Millis(60000));
    EXPECT_FALSE(r.timed_out);
    EXPECT_FALSE(crash::segment_exists(ring_)) << "a refused run must leave no segment";
    return r;
  }
  std::string ring_ = crash::unique_ring_name();
};

bool cuda_build() {
#if HSRING_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

TEST_F(GpuPreflightTest, NonexistentGpuIsOneClearError) {
  const CommandResult r = run({"--targets", "7", "--drafters", "0"});
  EXPECT_NE(r.exit_code, 0);
  if (cuda_build()) {
    EXPECT_NE(r.err.find("GPU 7 does not exist: this machine has"), std::string::npos) << r.err;
  } else {
    EXPECT_NE(r.err.find("need a CUDA build"), std::string::npos) << r.err;
  }
  EXPECT_EQ(r.err.find("target 0"), std::string::npos) << "no worker may start:\n" << r.err;
}

TEST_F(GpuPreflightTest, MemlockLimitBelowTheRingNamesUlimitAndSystemd) {
  if (!cuda_build()) GTEST_SKIP() << "a build without CUDA refuses GPU workers before memlock";
  // A ring of 4 x ~10 MiB slots against a limit lowered to 64 KiB for the launcher.
  std::vector<std::string> argv = {"/bin/sh", "-c",
                                   "ulimit -l 64 && exec " + crash::bin_dir() +
                                       "/hsring run --model synthetic --ring " + ring_ +
                                       " --targets 0 --drafters 0 --slots 4 --max-tokens 1024 "
                                       "--hidden-size 1024 --hs-min-ready 1 --batches 10 -q"};
  const CommandResult r = crash::run_command(argv, crash::Millis(60000));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("ulimit -l"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("LimitMEMLOCK=infinity"), std::string::npos) << r.err;
  EXPECT_FALSE(crash::segment_exists(ring_));
}

TEST_F(GpuPreflightTest, RingLargerThanDevShmIsRefusedBeforeCreation) {
  // 64 slots of 5 x 1M tokens x 8192 x bf16: about 5 TiB, more than any /dev/shm.
  const CommandResult r =
      run({}, {"--slots", "64", "--max-tokens", "1048576", "--hidden-size", "8192"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("/dev/shm has"), std::string::npos) << r.err;
}

TEST_F(GpuPreflightTest, TooFewSlotsForInFlightGpuBatches) {
  if (!cuda_build()) GTEST_SKIP() << "a build without CUDA refuses GPU workers first";
  const auto inventory_has_gpu = [] {
    // The slot check comes after the GPU check: only a machine with GPU 0 reaches it.
    return crash::run_command({"/bin/sh", "-c", "test -e /dev/nvidia0"}).exit_code == 0;
  };
  if (!inventory_has_gpu()) GTEST_SKIP() << "no GPU here: the GPU check refuses first";
  const CommandResult r =
      run({"--targets", "0", "--drafters", "0", "--target-postprocess-depth", "2"},
          {"--slots", "4", "--max-tokens", "16", "--hidden-size", "64", "--hs-min-ready", "2"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--hs-min-ready 2"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace hsring
