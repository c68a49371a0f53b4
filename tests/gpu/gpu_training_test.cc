// Drafter training on a GPU through `hsring run`: the tiny target on GPU 0, the training
// drafter on the second GPU when there is one (else on GPU 0 too). The loss must fall, the
// drafter be exported, and a drafter SIGKILLed mid-run must resume from its checkpoint on
// the GPU and continue. Skipped, with the reason, without a GPU.
#include <filesystem>
#include <regex>

#include "gpu/device.h"
#include "tests/crash/launcher_fixture.h"
#include "tests/gpu/gpu_test_util.h"

namespace hsring {
namespace {

using namespace launcher_testing;
using crash::Millis;
using crash::WorkerProcess;
namespace fs = std::filesystem;

constexpr Millis kTrainingLimit(300000);

class GpuTrainingTest : public LauncherTest {
 protected:
  std::vector<std::string> flags(const std::string& batches) const {
    const std::string drafter_gpu = gpu::probe_gpus().count >= 2 ? "1" : "0";
    return {"--model",      "tiny",
            "--targets",    "0",
            "--drafters",   drafter_gpu,
            "--slots",      "8",
            "--max-tokens", "256",
            "--batches",    batches,
            "--quiet",      "--max-restarts",
            "100"};
  }
};

// The default objective on a GPU drafter is DFlash (train/cuda_dflash_trainer.h): it
// learns, reports a teacher-forced acceptance length and writes the DFlash export folder.
TEST_F(GpuTrainingTest, GpuDrafterTrainsDflashByDefaultAndExportsIt) {
  HSRING_REQUIRE_GPUS(1);
  start_run(flags("150"), /*default_shape=*/true);
  ASSERT_EQ(wait_launcher(kTrainingLimit), 0) << launcher_->stderr_text();
  expect_data_intact();
  EXPECT_EQ(summary("steps"), 150);
  const double initial = summary("initial_loss"), final_loss = summary("final_loss");
  std::cout << "[ gpu dflash] loss " << initial << " -> " << final_loss << ", tau "
            << summary("acceptance_length_teacher_forced") << std::endl;
  EXPECT_LT(final_loss, initial);
  EXPECT_GE(summary("acceptance_length_teacher_forced"), 1.0);
  EXPECT_TRUE(fs::exists(run_dir() + "/export/config.json"));
  const std::string log = launcher_->stderr_text();
  EXPECT_NE(log.find("bf16 products on fp32 master weights"), std::string::npos) << log;
  EXPECT_NE(log.find("training drafter dflash"), std::string::npos) << log;
}

// The same-position objective, asked for by name.
TEST_F(GpuTrainingTest, GpuDrafterLossFallsAndTheDrafterIsExported) {
  HSRING_REQUIRE_GPUS(1);
  std::vector<std::string> f = flags("150");
  f.insert(f.end(), {"--objective", "same-position"});
  start_run(f, /*default_shape=*/true);
  ASSERT_EQ(wait_launcher(kTrainingLimit), 0) << launcher_->stderr_text();
  expect_data_intact();
  EXPECT_EQ(summary("batches_consumed"), 150);
  EXPECT_EQ(summary("steps"), 150);
  const double initial = summary("initial_loss"), final_loss = summary("final_loss");
  std::cout << "[ gpu train] loss " << initial << " -> " << final_loss << ", agreement "
            << summary("agreement") << std::endl;
  EXPECT_GT(initial, 4.0);  // ln(256) = 5.5 for a uniform guess
  EXPECT_LT(final_loss, 0.5 * initial);
  EXPECT_GT(summary("agreement"), 0.3);
  EXPECT_TRUE(fs::exists(run_dir() + "/drafter.safetensors"));
  const std::string log = launcher_->stderr_text();
  EXPECT_NE(log.find("bf16 products on fp32 master weights"), std::string::npos)
      << "the drafter says it trains on its GPU:\n"
      << log;
}

TEST_F(GpuTrainingTest, KilledGpuDrafterResumesFromItsCheckpoint) {
  HSRING_REQUIRE_GPUS(1);
  std::vector<std::string> f = flags("600");
  f.insert(f.end(), {"--checkpoint-every", "10"});
  start_run(f, /*default_shape=*/true);
  ASSERT_TRUE(wait_for_consumed(35, Millis(120000))) << launcher_->stderr_text();
  std::optional<WorkerProcess> drafter = wait_for_worker("drafter", 0);
  ASSERT_TRUE(drafter);
  ASSERT_TRUE(kill_and_await_restart(*drafter)) << "the drafter was not restarted";
  ASSERT_EQ(wait_launcher(kTrainingLimit), 0) << launcher_->stderr_text();
  const std::string log = launcher_->stderr_text();
  std::smatch resumed;
  ASSERT_TRUE(std::regex_search(log, resumed, std::regex("resumed from \\S+ at step (\\d+)")))
      << log;
  const uint64_t resume_step = std::stoull(resumed[1]);
  EXPECT_GE(resume_step, 10u);
  EXPECT_EQ(resume_step % 10, 0u);
  expect_data_intact();
  EXPECT_EQ(summary("restarts_drafter"), 1);
  // The steps after the last checkpoint are lost with the kill: none when it landed just
  // after one (seen once with the DFlash step on an H200, 2026-12-02).
  const double steps = summary("steps");
  EXPECT_LE(steps, 600);
  EXPECT_GT(steps, 600 - 10 - 8);
  EXPECT_LT(summary("final_loss"), summary("initial_loss"));
}

// Two GPU drafters (GPUs 0 and 1) train one model, all-reducing with NCCL (the cheap
// same-position model: these tests are about the group).
std::vector<std::string> group_flags(const std::string& batches) {
  return {"--model",      "tiny",
          "--targets",    "0",
          "--drafters",   "0,1",
          "--slots",      "8",
          "--max-tokens", "256",
          "--batches",    batches,
          "--quiet",      "--max-restarts",
          "100",          "--objective",
          "same-position"};
}

TEST_F(GpuTrainingTest, TwoGpuDraftersTrainOneModelWithNccl) {
  HSRING_REQUIRE_GPUS(2);
  start_run(group_flags("160"), /*default_shape=*/true);
  ASSERT_EQ(wait_launcher(kTrainingLimit), 0) << launcher_->stderr_text();
  expect_data_intact();
  EXPECT_EQ(summary("batches_consumed"), 160);
  const double steps = summary("steps");
  EXPECT_LE(steps, 80);
  EXPECT_GE(steps, 78);  // the last batches may not pair up before the drain
  const double initial = summary("initial_loss"), final_loss = summary("final_loss");
  std::cout << "[ gpu nccl ] 2 drafters: " << steps << " steps, loss " << initial << " -> "
            << final_loss << std::endl;
  EXPECT_LT(final_loss, 0.6 * initial);
  const std::string log = launcher_->stderr_text();
  EXPECT_NE(log.find("of a group of 2: all-reducing gradients with NCCL"), std::string::npos)
      << log;
  EXPECT_EQ(log.find("leaving the drafter group"), std::string::npos) << log;
}

// SIGKILL of drafter 1 mid-collective or between: drafter 0 notices (NCCL alone would
// hang), aborts its communicator and leaves; both reload the newest checkpoint, form a new
// NCCL group through a fresh id, and finish with a falling loss.
TEST_F(GpuTrainingTest, KilledNcclGroupMemberRestartsTheGroupFromACheckpoint) {
  HSRING_REQUIRE_GPUS(2);
  std::vector<std::string> f = group_flags("1200");
  f.insert(f.end(), {"--checkpoint-every", "5"});
  start_run(f, /*default_shape=*/true);
  ASSERT_TRUE(wait_for_consumed(60, Millis(120000))) << launcher_->stderr_text();
  std::optional<WorkerProcess> drafter = wait_for_worker("drafter", 1);
  ASSERT_TRUE(drafter);
  ASSERT_TRUE(kill_and_await_restart(*drafter)) << "drafter 1 was not restarted";
  ASSERT_EQ(wait_launcher(kTrainingLimit), 0) << launcher_->stderr_text();
  const std::string log = launcher_->stderr_text();
  EXPECT_NE(log.find("leaving the drafter group"), std::string::npos) << log;
  const Resumes resumes = resumes_in(log);
  EXPECT_EQ(resumes.drafters, (std::set<uint32_t>{0, 1})) << log;
  for (uint64_t step : resumes.steps) EXPECT_EQ(step % 5, 0u);
  expect_data_intact();
  EXPECT_EQ(summary("restarts_drafter"), 1);  // the kill; leaving the group is no crash
  const double steps = summary("steps");
  EXPECT_LT(steps, 600);
  EXPECT_GT(steps, 600 - 5 - 8);
  EXPECT_LT(summary("final_loss"), 0.6 * summary("initial_loss"));
}

}  // namespace
}  // namespace hsring
