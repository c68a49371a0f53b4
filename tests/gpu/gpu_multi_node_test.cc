// Drafter training across machines, as two launchers on one machine acting as two nodes:
// each has its own ring, a CPU target (the tiny model) and one GPU drafter; the two
// drafters form one NCCL group through files in the shared run folder. NCCL_HOSTID gives
// each "node" its own host identity, so NCCL connects them through its network transport
// (sockets on the loopback) as it would two machines, and lets both drafters share GPU 0
// on a one-GPU machine. Skipped, with the reason, without a GPU.
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

constexpr Millis kTrainingLimit(400000);

class MultiNodeTest : public LauncherTest {
 protected:
  void TearDown() override {
    node1_.reset();
    LauncherTest::TearDown();
    Ring::remove(node1_ring());
  }

  std::string node1_ring() const { return ring_ + "-n1"; }

  std::vector<std::string> env(uint32_t node) const {
    return {"NCCL_HOSTID=hsring-test-node-" + std::to_string(node), "NCCL_SOCKET_IFNAME=lo",
            "NCCL_IB_DISABLE=1"};
  }

  // The node's flags; without `--nnodes`/`--node-rank` when `torchrun` gives them instead.
  std::vector<std::string> flags(uint32_t node, const std::string& batches,
                                 bool torchrun = false) const {
    const std::string gpu = gpu::probe_gpus().count >= 2 ? std::to_string(node) : "0";
    std::vector<std::string> f = {
        "--model",   "tiny",    "--targets",   "cpu:1",          "--drafters",
        gpu,         "--slots", "8",           "--max-tokens",   "256",
        "--batches", batches,   "--quiet",     "--max-restarts", "100",
        "--run-dir", run_dir(), "--objective", "same-position"};
    if (!torchrun) f.insert(f.end(), {"--nnodes", "2", "--node-rank", std::to_string(node)});
    return f;
  }

  // Node 0 through the fixture (its ring, summary and helpers), node 1 beside it.
  void start_nodes(std::vector<std::string> node0, std::vector<std::string> node1,
                   std::vector<std::string> node1_env = {}) {
    start_run(node0, /*default_shape=*/true, env(0));
    std::vector<std::string> environment = env(1);
    environment.insert(environment.end(), node1_env.begin(), node1_env.end());
    std::vector<std::string> argv = {
        hsring(), "run", "--ring", node1_ring(), "--summary-json", dir_.file("summary1.json")};
    argv.insert(argv.end(), node1.begin(), node1.end());
    node1_ = std::make_unique<crash::Spawned>(argv, dir_.file("node1.out"), dir_.file("node1.err"),
                                              environment);
  }

  int wait_node1() {
    const std::optional<int> status = node1_->wait(kTrainingLimit);
    if (!status || !WIFEXITED(*status)) {
      ADD_FAILURE() << "node 1's launcher did not exit cleanly\n" << node1_->stderr_text();
      return -1;
    }
    return WEXITSTATUS(*status);
  }

  double node1_summary(const std::string& key) {
    const std::optional<double> value =
        crash::json_number(crash::read_file(dir_.file("summary1.json")), key);
    if (!value) ADD_FAILURE() << "node 1's summary has no '" << key << "'";
    return value.value_or(-1);
  }

  std::unique_ptr<crash::Spawned> node1_;
};

// The line of `log` that says its drafter left the group (printed, for the record), or ""
// when none does.
std::string group_leaving_line(const std::string& log, const std::string& node) {
  const size_t at = log.find("leaving the drafter group");
  if (at == std::string::npos) return "";
  const std::string line = log.substr(at, log.find('\n', at) - at);
  std::cout << "[ 2 nodes  ] " << node << ": " << line << std::endl;
  return line;
}

// Node 1 learns its place from torchrun's variables, node 0 from its flags.
TEST_F(MultiNodeTest, TwoNodesTrainOneModelThroughTheSharedFolder) {
  HSRING_REQUIRE_GPUS(1);
  start_nodes(flags(0, "120"), flags(1, "120", /*torchrun=*/true),
              {"GROUP_WORLD_SIZE=2", "GROUP_RANK=1", "LOCAL_WORLD_SIZE=1"});
  ASSERT_EQ(wait_launcher(kTrainingLimit), 0) << launcher_->stderr_text();
  ASSERT_EQ(wait_node1(), 0) << node1_->stderr_text();
  const std::string log0 = launcher_->stderr_text(), log1 = node1_->stderr_text();
  expect_data_intact();
  EXPECT_EQ(node1_summary("batches_torn"), 0);
  EXPECT_EQ(node1_summary("batches_lost"), 0);
  // One batch per node per step: both nodes step together.
  const double steps0 = summary("steps"), steps1 = node1_summary("steps");
  EXPECT_GE(steps0, 118);
  EXPECT_LE(steps0, 120);
  EXPECT_EQ(steps0, steps1);
  const double initial = summary("initial_loss"), final_loss = summary("final_loss");
  std::cout << "[ 2 nodes  ] " << steps0 << " steps, loss " << initial << " -> " << final_loss
            << " (node 1: " << node1_summary("final_loss") << ")" << std::endl;
  EXPECT_LT(final_loss, 0.6 * initial);
  for (const std::string* log : {&log0, &log1}) {
    EXPECT_NE(log->find("of a group of 2: all-reducing gradients with NCCL"), std::string::npos)
        << *log;
    EXPECT_NE(log->find("id through " + run_dir() + "/rendezvous"), std::string::npos) << *log;
    EXPECT_EQ(log->find("leaving the drafter group"), std::string::npos) << *log;
  }
  EXPECT_NE(log1.find("node 1 of 2"), std::string::npos) << log1;
  // Node 0's drafter 0 writes the checkpoints and the export; node 1 writes none.
  EXPECT_TRUE(fs::exists(run_dir() + "/drafter.safetensors"));
  EXPECT_EQ(log1.find("checkpoint " + run_dir()), std::string::npos) << log1;
}

// SIGKILL of node 1's drafter: node 0's drafter learns it only through the rendezvous
// (its restarted successor marks the group broken) or an NCCL error, leaves, and both
// reload the newest checkpoint and form the next generation.
TEST_F(MultiNodeTest, AMemberKilledOnOneNodeRestartsTheGroupOnBoth) {
  HSRING_REQUIRE_GPUS(1);
  std::vector<std::string> f0 = flags(0, "600"), f1 = flags(1, "600");
  for (auto* f : {&f0, &f1}) f->insert(f->end(), {"--checkpoint-every", "5"});
  start_nodes(f0, f1);
  ASSERT_TRUE(wait_for_consumed(40, Millis(180000))) << launcher_->stderr_text();
  const std::optional<WorkerProcess> victim = crash::find_worker(node1_->pid(), "drafter", 0);
  ASSERT_TRUE(victim) << node1_->stderr_text();
  ::kill(victim->id.pid, SIGKILL);
  ASSERT_EQ(wait_launcher(kTrainingLimit), 0) << launcher_->stderr_text();
  ASSERT_EQ(wait_node1(), 0) << node1_->stderr_text();
  const std::string log0 = launcher_->stderr_text(), log1 = node1_->stderr_text();
  ASSERT_NE(group_leaving_line(log0, "node 0"), "") << log0;
  const Resumes resumed0 = resumes_in(log0), resumed1 = resumes_in(log1);
  EXPECT_FALSE(resumed0.steps.empty()) << log0;
  EXPECT_FALSE(resumed1.steps.empty()) << log1;
  for (uint64_t step : resumed1.steps) EXPECT_EQ(step % 5, 0u);
  expect_data_intact();
  EXPECT_EQ(node1_summary("restarts_drafter"), 1);
  const double steps = summary("steps");
  std::cout << "[ 2 nodes  ] after the kill: " << steps << " steps, loss "
            << summary("initial_loss") << " -> " << summary("final_loss") << std::endl;
  EXPECT_LT(steps, 600);
  EXPECT_GT(steps, 600 - 5 - 8);
  EXPECT_LT(summary("final_loss"), 0.6 * summary("initial_loss"));
}

// SIGKILL of node 0's drafter, the leader: its successor publishes the next generation,
// which ends the old one for node 1's drafter; both resume from the newest checkpoint.
TEST_F(MultiNodeTest, AKilledLeaderRestartsTheGroupOnBoth) {
  HSRING_REQUIRE_GPUS(1);
  std::vector<std::string> f0 = flags(0, "400"), f1 = flags(1, "400");
  for (auto* f : {&f0, &f1}) f->insert(f->end(), {"--checkpoint-every", "5"});
  start_nodes(f0, f1);
  ASSERT_TRUE(wait_for_consumed(40, Millis(180000))) << launcher_->stderr_text();
  std::optional<WorkerProcess> leader = wait_for_worker("drafter", 0);
  ASSERT_TRUE(leader);
  ASSERT_TRUE(kill_and_await_restart(*leader)) << "the leader was not restarted";
  ASSERT_EQ(wait_launcher(kTrainingLimit), 0) << launcher_->stderr_text();
  ASSERT_EQ(wait_node1(), 0) << node1_->stderr_text();
  const std::string log1 = node1_->stderr_text();
  ASSERT_NE(group_leaving_line(log1, "node 1"), "") << log1;
  EXPECT_FALSE(resumes_in(launcher_->stderr_text()).steps.empty());
  EXPECT_FALSE(resumes_in(log1).steps.empty()) << log1;
  expect_data_intact();
  EXPECT_EQ(summary("restarts_drafter"), 1);
  EXPECT_EQ(node1_summary("restarts_drafter"), 0);  // leaving the group is no crash
  const double steps = summary("steps");
  EXPECT_LT(steps, 400);
  EXPECT_GT(steps, 400 - 5 - 8);
  EXPECT_LT(summary("final_loss"), 0.6 * summary("initial_loss"));
}

// Node 1's run ends first (its --batches): its drafter marks the group stopped, and node
// 0's drafter, waiting on it in the next all-reduce, checkpoints where the group was and
// makes node 0's launcher stop too, instead of waiting for a peer that will not return.
TEST_F(MultiNodeTest, AMachineWhoseRunEndsStopsTheOthers) {
  HSRING_REQUIRE_GPUS(1);
  start_nodes(flags(0, "100000"), flags(1, "60"));
  ASSERT_EQ(wait_node1(), 0) << node1_->stderr_text();
  ASSERT_EQ(wait_launcher(Millis(120000)), 0) << launcher_->stderr_text();
  const std::string log0 = launcher_->stderr_text();
  EXPECT_NE(log0.find("the drafter group stopped on another machine"), std::string::npos) << log0;
  expect_data_intact();
  const double steps = summary("steps");
  std::cout << "[ 2 nodes  ] node 1 stopped after 60 batches; node 0 stopped at step " << steps
            << std::endl;
  EXPECT_GE(steps, 58);
  EXPECT_LE(steps, 61);
  EXPECT_EQ(summary("restarts_drafter"), 0);
  EXPECT_TRUE(fs::exists(run_dir() + "/drafter.safetensors"));
}

}  // namespace
}  // namespace hsring
