// The command lines the launcher gives its workers for a run over several machines: each
// node's targets learn their share of the data, its drafters their rank and the shared
// folder where the group meets; a one-machine run passes none of it.
#include "launcher/worker_command.h"

#include <stdlib.h>

#include <gtest/gtest.h>

#include <algorithm>

#include "launcher/user_command.h"

namespace hsring {
namespace {

// The value after `flag` in `argv`, or nullopt when the flag is absent.
std::optional<std::string> value_of(const std::vector<std::string>& argv, const std::string& flag) {
  const auto it = std::find(argv.begin(), argv.end(), flag);
  if (it == argv.end() || it + 1 == argv.end()) return std::nullopt;
  return *(it + 1);
}

RunOptions model_run() {
  RunOptions o;
  o.model = "tiny";
  o.run_dir = "/shared/runs/r1";
  return o;
}

TEST(WorkerCommandTest, EachNodesWorkersLearnTheirPlaceInTheGroup) {
  RunOptions o = model_run();
  o.nnodes = 3;
  o.node_rank = 2;
  const std::vector<std::string> target = worker_argv(o, Role::kTarget, 0, -1, "/bin");
  EXPECT_EQ(value_of(target, "--nnodes"), "3");
  EXPECT_EQ(value_of(target, "--node-rank"), "2");
  EXPECT_EQ(value_of(target, "--rendezvous-dir"), std::nullopt) << "targets need no group";
  const std::vector<std::string> drafter = worker_argv(o, Role::kDrafter, 1, 5, "/bin");
  EXPECT_EQ(value_of(drafter, "--nnodes"), "3");
  EXPECT_EQ(value_of(drafter, "--node-rank"), "2");
  EXPECT_EQ(value_of(drafter, "--rendezvous-dir"), "/shared/runs/r1/rendezvous");
  EXPECT_EQ(value_of(drafter, "--checkpoint-dir"), "/shared/runs/r1/checkpoints");
  // Where drafter 0 writes the training curves (metrics.jsonl, tensorboard/).
  EXPECT_EQ(value_of(drafter, "--run-dir"), "/shared/runs/r1");
  // --rendezvous-dir chooses another folder.
  o.rendezvous_dir = "/fast/rv";
  EXPECT_EQ(value_of(worker_argv(o, Role::kDrafter, 0, 5, "/bin"), "--rendezvous-dir"), "/fast/rv");
}

TEST(WorkerCommandTest, OneMachinePassesNoneOfIt) {
  const RunOptions o = model_run();
  for (Role role : {Role::kTarget, Role::kDrafter}) {
    const std::vector<std::string> argv = worker_argv(o, role, 0, -1, "/bin");
    for (const char* flag : {"--nnodes", "--node-rank", "--rendezvous-dir"})
      EXPECT_EQ(value_of(argv, flag), std::nullopt) << flag;
  }
}

// A CPU worker is the program that loads no CUDA library; a GPU worker is the GPU build.
TEST(WorkerCommandTest, GpuWorkersRunTheGpuBuildOfEachProgram) {
  const RunOptions o = model_run();
  EXPECT_EQ(worker_argv(o, Role::kTarget, 0, -1, "/bin")[0], "/bin/hsring-target");
  EXPECT_EQ(worker_argv(o, Role::kDrafter, 0, -1, "/bin")[0], "/bin/hsring-drafter");
  EXPECT_EQ(worker_argv(o, Role::kTarget, 0, 3, "/bin")[0], "/bin/hsring-target-gpu");
  EXPECT_EQ(worker_argv(o, Role::kDrafter, 1, 0, "/bin")[0], "/bin/hsring-drafter-gpu");
}

// The value of `name` in a user command's environment, or nullopt when it is not set.
std::optional<std::string> env_of(const UserWorkerCommand& c, const std::string& name) {
  for (const auto& [key, value] : c.env)
    if (key == name) return value;
  return std::nullopt;
}

// A user command learns its place as hsring's own workers do from their flags: the GPU
// (renumbered 0 by CUDA_VISIBLE_DEVICES; HSRING_GPU keeps the machine's id for status),
// the epoch its start opens, and the profile period the launcher resolved.
TEST(WorkerCommandTest, UserCommandsGetTheirPlaceThroughTheEnvironment) {
  ::unsetenv("HSRING_PROFILE_INTERVAL");
  RunOptions o = model_run();
  o.ring = "r";
  o.target_cmd = "python3 t.py";
  const UserWorkerCommand gpu = user_worker_command(o, Role::kTarget, 1, 3, 5, "/bin");
  EXPECT_EQ(gpu.argv, (std::vector<std::string>{"/bin/sh", "-c", "python3 t.py"}));
  EXPECT_EQ(env_of(gpu, "HSRING_RING"), "r");
  EXPECT_EQ(env_of(gpu, "HSRING_ROLE"), "target");
  EXPECT_EQ(env_of(gpu, "HSRING_INDEX"), "1");
  EXPECT_EQ(env_of(gpu, "HSRING_EPOCH"), "5");
  EXPECT_EQ(env_of(gpu, "CUDA_VISIBLE_DEVICES"), "3");
  EXPECT_EQ(env_of(gpu, "HSRING_GPU"), "3");
  EXPECT_EQ(env_of(gpu, "HSRING_PROFILE_INTERVAL"), std::nullopt) << "the run does not profile";
  o.profile_interval_s = 0.25;
  const UserWorkerCommand cpu = user_worker_command(o, Role::kTarget, 0, -1, 1, "/bin");
  EXPECT_EQ(env_of(cpu, "CUDA_VISIBLE_DEVICES"), std::nullopt);
  EXPECT_EQ(env_of(cpu, "HSRING_GPU"), std::nullopt);
  EXPECT_EQ(env_of(cpu, "HSRING_PROFILE_INTERVAL"), "0.25");
  // --profile-interval 0 over an inherited variable: 0 is passed, as to hsring's workers.
  o.profile_interval_s = 0;
  ::setenv("HSRING_PROFILE_INTERVAL", "2", 1);
  EXPECT_EQ(
      env_of(user_worker_command(o, Role::kTarget, 0, -1, 1, "/bin"), "HSRING_PROFILE_INTERVAL"),
      "0");
  ::unsetenv("HSRING_PROFILE_INTERVAL");
}

}  // namespace
}  // namespace hsring
