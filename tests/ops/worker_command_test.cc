// The command lines the launcher gives its workers for a run over several machines: each
// node's targets learn their share of the data, its drafters their rank and the shared
// folder where the group meets; a one-machine run passes none of it.
#include "launcher/worker_command.h"

#include <stdlib.h>

#include <gtest/gtest.h>

#include <algorithm>

#include "launcher/user_command.h"
#include "worker/run_flags.h"

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
// the epoch its start opens, and the profile period the launcher resolved (0: off).
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
  EXPECT_EQ(env_of(gpu, "HSRING_PROFILE_INTERVAL"), "0") << "the run does not profile";
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

// The run's flags reach a user command through the flag table: each row that names a
// variable gives its value, as the flag's own worker would read it, to the roles it reaches
// in the runs it is passed in; a new row with a variable needs no code here.
TEST(WorkerCommandTest, UserCommandsGetTheFlagsTheTableGivesAVariable) {
  RunOptions o = model_run();
  o.ring = "r";
  o.target_cmd = o.drafter_cmd = "python3 w.py";
  o.data = "/data/shards";
  o.data_seed = 7;
  o.read_ahead = 9;
  o.nnodes = 3;
  o.node_rank = 1;
  o.profile_interval_s = 0.5;
  size_t with_env = 0;
  for (const RunFlag& flag : run_flags()) {
    if (flag.env.empty()) continue;
    ++with_env;
    for (Role role : {Role::kTarget, Role::kDrafter}) {
      const uint8_t program = role == Role::kTarget ? kTargets : kDrafters;
      const std::optional<std::string> got =
          env_of(user_worker_command(o, role, 0, -1, 1, "/bin"), std::string(flag.env));
      if (flag.reach & program)
        EXPECT_EQ(got, flag_value_text(o, flag)) << flag.env << " for " << to_string(role);
      else
        EXPECT_EQ(got, std::nullopt) << flag.env << " for " << to_string(role);
    }
  }
  EXPECT_GE(with_env, 8u);
  // What python/hsring's from_env() reads (producer.py, consumer.py, _env.py).
  const UserWorkerCommand target = user_worker_command(o, Role::kTarget, 2, -1, 1, "/bin");
  EXPECT_EQ(env_of(target, "HSRING_RING"), "r");
  EXPECT_EQ(env_of(target, "HSRING_MODEL"), "tiny");
  EXPECT_EQ(env_of(target, "HSRING_DATA"), "/data/shards");
  EXPECT_EQ(env_of(target, "HSRING_DATA_SEED"), "7");
  EXPECT_EQ(env_of(target, "HSRING_READ_AHEAD"), "9");
  EXPECT_EQ(env_of(target, "HSRING_NNODES"), "3");
  EXPECT_EQ(env_of(target, "HSRING_NODE_RANK"), "1");
  EXPECT_EQ(env_of(target, "HSRING_PROFILE_INTERVAL"), "0.5");
  const UserWorkerCommand drafter = user_worker_command(o, Role::kDrafter, 0, -1, 1, "/bin");
  EXPECT_EQ(env_of(drafter, "HSRING_RING"), "r");
  EXPECT_EQ(env_of(drafter, "HSRING_DATA"), std::nullopt) << "--data reaches the targets only";
  // A synthetic run has no model, and its targets read no data (as hsring-target is passed
  // none of it); an empty --data is no variable.
  o.model = "synthetic";
  const UserWorkerCommand synthetic = user_worker_command(o, Role::kTarget, 0, -1, 1, "/bin");
  EXPECT_EQ(env_of(synthetic, "HSRING_MODEL"), std::nullopt);
  EXPECT_EQ(env_of(synthetic, "HSRING_DATA_SEED"), std::nullopt);
  EXPECT_EQ(env_of(synthetic, "HSRING_RING"), "r");
  o.model = "tiny";
  o.data.clear();
  EXPECT_EQ(env_of(user_worker_command(o, Role::kTarget, 0, -1, 1, "/bin"), "HSRING_DATA"),
            std::nullopt);
}

}  // namespace
}  // namespace hsring
