// The GPU workers as real processes: `hsring run` with a GPU target and a GPU drafter on
// one GPU and on two, in both layouts, every element verified; and a target SIGKILLed
// mid-copy many times while the drafter keeps running, which must never hang the drafter
// nor let it see torn data, nor lose or double a batch. Skipped, with the reason, without
// a GPU.
#include <gtest/gtest.h>

#include <signal.h>
#include <iostream>

#include <random>
#include <thread>

#include "common/clock.h"
#include "shm/copy_ticket.h"
#include "shm/futex.h"
#include "shm/ledger.h"
#include "shm/recovery.h"
#include "shm/ring.h"
#include "tests/crash/process_util.h"
#include "tests/gpu/gpu_test_util.h"

namespace hsring {
namespace {

using crash::CommandResult;

class GpuLauncherTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (crash::segment_exists(ring_)) Ring::remove(ring_);
  }
  CommandResult run(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {crash::bin_dir() + "/hsring",
                                     "run",
                                     "--ring",
                                     ring_,
                                     "--model",
                                     "synthetic",
                                     "--slots",
                                     "8",
                                     "--max-tokens",
                                     "2048",
                                     "--hidden-size",
                                     "1024",
                                     "--hs-min-ready",
                                     "2",
                                     "--summary-json",
                                     dir_.file("summary.json"),
                                     "--keep-ring",
                                     "-q"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    CommandResult r = crash::run_command(argv, crash::Millis(170000));
    EXPECT_FALSE(r.timed_out) << "hsring run hung:\n" << r.err;
    return r;
  }
  // `hsring run` of the target model (its own hidden size), a training run folder here.
  CommandResult run_model(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {crash::bin_dir() + "/hsring",
                                     "run",
                                     "--ring",
                                     ring_,
                                     "--slots",
                                     "8",
                                     "--max-tokens",
                                     "256",
                                     "--run-dir",
                                     dir_.file("run"),
                                     "--summary-json",
                                     dir_.file("summary.json"),
                                     "-q"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    CommandResult r = crash::run_command(argv, crash::Millis(170000));
    EXPECT_FALSE(r.timed_out) << "hsring run hung:\n" << r.err;
    return r;
  }
  double summary(const std::string& key) {
    const std::string json = crash::read_file(dir_.file("summary.json"));
    const auto value = crash::json_number(json, key);
    if (!value) ADD_FAILURE() << "summary has no '" << key << "':\n" << json;
    return value.value_or(-1);
  }
  // A finished run: exit 0, every batch consumed once and intact, stages in the status.
  void expect_intact(const CommandResult& r, double batches) {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(summary("batches_consumed"), batches) << r.err;
    EXPECT_EQ(summary("batches_torn"), 0);
    EXPECT_EQ(summary("batches_lost"), 0);
    EXPECT_EQ(summary("batches_duplicated"), 0);
    EXPECT_NE(r.err.find("pinned the ring's 8 slot payloads"), std::string::npos)
        << "each GPU worker logs how long pinning took:\n"
        << r.err;
    const CommandResult status =
        crash::run_command({crash::bin_dir() + "/hsring", "ring", "inspect", ring_});
    for (const char* stage : {"target.forward", "target.copy", "target.publish_wait", "drafter.h2d",
                              "drafter.verify", "drafter.claim_wait"})
      EXPECT_NE(status.out.find(stage), std::string::npos) << stage << " missing from:\n"
                                                           << status.out;
  }
  std::string ring_ = crash::unique_ring_name();
  crash::TempDir dir_;
};

TEST_F(GpuLauncherTest, OneGpuTargetAndDrafterSplitLayers) {
  HSRING_REQUIRE_GPUS(1);
  expect_intact(
      run({"--targets", "0", "--drafters", "0", "--batches", "200", "--noise-std", "0.1"}), 200);
}

// hsring run with --target-publish early: slots published when their copy starts, the
// drafter polling the target's CUDA IPC events (a separate process's, opened by handle).
TEST_F(GpuLauncherTest, OneGpuEarlyPublishThroughTheLauncher) {
  HSRING_REQUIRE_GPUS(1);
  const CommandResult r = run({"--targets", "0", "--drafters", "0", "--batches", "200",
                               "--target-publish", "early", "--gemm-flops-per-batch", "2e11"});
  expect_intact(r, 200);
  EXPECT_NE(r.err.find("published early (CUDA IPC events)"), std::string::npos) << r.err;
}

TEST_F(GpuLauncherTest, OneGpuConcatenatedLayersWithGemmForward) {
  HSRING_REQUIRE_GPUS(1);
  expect_intact(
      run({"--targets", "0", "--drafters", "0", "--batches", "100", "--no-split-fc-layers",
           "--gemm-flops-per-batch", "2e11", "--target-postprocess-depth", "2"}),
      100);
}

TEST_F(GpuLauncherTest, TwoGpusTargetOnOneDrafterOnTheOther) {
  HSRING_REQUIRE_GPUS(2);
  expect_intact(run({"--targets", "0", "--drafters", "1", "--batches", "200", "--noise-schedule",
                     "linear:0.2,0.0,100"}),
                200);
}

TEST_F(GpuLauncherTest, TwoGpusEachHostingATargetAndADrafter) {
  HSRING_REQUIRE_GPUS(2);
  expect_intact(
      run({"--targets", "0,1", "--drafters", "1,0", "--batches", "300", "--no-split-fc-layers"}),
      300);
}

// The CUDA target model over the built-in corpus feeds a CPU drafter that trains on its
// captured layers: every batch arrives intact and the drafter's loss falls.
TEST_F(GpuLauncherTest, GpuModelTargetFeedsATrainingDrafter) {
  HSRING_REQUIRE_GPUS(1);
  const CommandResult r =
      run_model({"--model", "tiny", "--targets", "0", "--drafters", "cpu:1", "--batches", "150"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(summary("batches_consumed"), 150) << r.err;
  EXPECT_EQ(summary("batches_torn"), 0) << r.err;
  EXPECT_EQ(summary("batches_lost"), 0);
  EXPECT_EQ(summary("batches_duplicated"), 0);
  EXPECT_NE(r.err.find("MiB of bf16 weights"), std::string::npos) << r.err;
  EXPECT_LT(summary("final_loss"), 0.5 * summary("initial_loss")) << r.err;
  std::cout << "[ gpu model] loss " << summary("initial_loss") << " -> " << summary("final_loss")
            << ", agreement " << summary("agreement") << std::endl;
}

// GPU target and GPU drafter on model batches, concatenated layout: the drafter checks
// each batch's invariants (tokens, labels in the vocabulary, offsets) after its H2D.
TEST_F(GpuLauncherTest, GpuModelTargetAndGpuDrafterConcatenated) {
  HSRING_REQUIRE_GPUS(1);
  const CommandResult r = run_model({"--model", "tiny", "--targets", "0", "--drafters", "0",
                                     "--batches", "200", "--no-split-fc-layers"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(summary("batches_consumed"), 200) << r.err;
  EXPECT_EQ(summary("batches_torn"), 0) << r.err;
  EXPECT_EQ(summary("batches_lost"), 0);
  EXPECT_EQ(summary("batches_duplicated"), 0);
}

// The test plays launcher itself, so it can restart the target at once (the launcher's
// backoff would make many kills slow) and kill it exactly while one of its copies is in
// flight: while it holds a slot in WRITING, or (early publish) while a slot it published
// still has its copy pending.
// `copy_delay_us` slows each copy down on the GPU (inside the copy's own events), so that
// kills land while a copy's event is still pending.
void kill_target_mid_copy_many_times(const std::string& publish, uint32_t copy_delay_us) {
  const int drafter_gpu = gpu::probe_gpus().count >= 2 ? 1 : 0;
  const std::string name = crash::unique_ring_name();
  crash::TempDir dir;
  RingShape shape;
  shape.slot_count = 8;
  shape.max_tokens = 4096;
  shape.hidden_size = 2048;  // 80 MiB slots: each copy takes milliseconds
  shape.num_layers = 5;
  shape.num_targets = 1;
  shape.num_drafters = 1;
  shape.hs_min_ready = 1;
  shape.ledger_capacity = 1 << 20;
  auto ring = Ring::create(name, shape);
  const std::string bin = crash::bin_dir();
  auto spawn_target = [&](int n) {
    return std::make_unique<crash::Spawned>(
        std::vector<std::string>{bin + "/hsring-target", "--ring", name, "--index", "0", "--gpu",
                                 "0", "--publish", publish, "--debug-copy-delay-us",
                                 std::to_string(copy_delay_us)},
        dir.file("target" + std::to_string(n) + ".out"), dir.file("target.err"));
  };
  crash::Spawned drafter({bin + "/hsring-drafter", "--ring", name, "--index", "0", "--gpu",
                          std::to_string(drafter_gpu), "--noise-std", "0.05"},
                         dir.file("drafter.out"), dir.file("drafter.err"));
  ProcessEntry& target_entry = ring->process(0);
  ProcessEntry& drafter_entry = ring->process(1);
  std::mt19937 rng(12345);
  const int kKills = 20;
  int killed_while_writing = 0;
  for (int kill = 0; kill <= kKills; ++kill) {
    const uint32_t epoch_before = target_entry.epoch.load();
    auto target = spawn_target(kill);
    // Wait for this incarnation to run, then for a moment, then for one of its copies.
    const uint64_t deadline = monotonic_ns() + 60'000'000'000ull;
    while (!(target_entry.epoch.load() > epoch_before &&
             target_entry.state.load() == uint32_t(ProcessState::kRunning))) {
      ASSERT_LT(monotonic_ns(), deadline) << "target never started:\n"
                                          << crash::read_file(dir.file("target.err"));
      ASSERT_FALSE(target->wait(crash::Millis(0)).has_value())
          << "target exited:\n"
          << crash::read_file(dir.file("target.err"));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (kill == kKills) {
      // The last incarnation runs on, then the ring drains.
      std::this_thread::sleep_for(std::chrono::seconds(2));
      ring->header().run_state.store(uint32_t(RunState::kDraining), std::memory_order_release);
      SharedCondition(ring->header().free_futex, ring->header().free_waiters).notify_all();
      SharedCondition(ring->header().ready_futex, ring->header().ready_waiters).notify_all();
      target->signal(SIGTERM);
      drafter.signal(SIGTERM);
      const auto t = target->wait(crash::Millis(30000));
      const auto d = drafter.wait(crash::Millis(30000));
      ASSERT_TRUE(t.has_value()) << "the target hung at drain";
      ASSERT_TRUE(d.has_value()) << "the drafter hung at drain";
      EXPECT_EQ(crash::describe_status(*t), "exit 0") << crash::read_file(dir.file("target.err"));
      EXPECT_EQ(crash::describe_status(*d), "exit 0") << crash::read_file(dir.file("drafter.err"));
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50 + rng() % 250));
    const uint32_t epoch = target_entry.epoch.load();
    bool writing = false;
    const uint64_t wait_writing = monotonic_ns() + 5'000'000'000ull;
    while (!writing && monotonic_ns() < wait_writing) {
      for (uint32_t i = 0; i < ring->slot_count() && !writing; ++i) {
        const SlotHeader& slot = ring->slot(i);
        const SlotState s(slot.state.load());
        const bool pending = copy_pending(slot.copy_ticket.load()) && slot.producer.load() == 0 &&
                             slot.producer_epoch.load() == (epoch & SlotState::kEpochMask) &&
                             (s.phase() == SlotPhase::kReady || s.phase() == SlotPhase::kReading);
        writing = (s.phase() == SlotPhase::kWriting && s.held_by(0, epoch)) || pending;
      }
    }
    target->signal(SIGKILL);
    ASSERT_TRUE(target->wait(crash::Millis(10000)).has_value());
    killed_while_writing += writing;
    recover_dead_owners(*ring);  // what the launcher does when a pidfd reports a death
    ASSERT_FALSE(drafter.wait(crash::Millis(0)).has_value())
        << "the drafter died:\n"
        << crash::read_file(dir.file("drafter.err"));
  }
  recover_dead_owners(*ring);
  const uint64_t next_seq = ring->target_progress(0).next_seq.load();
  const LedgerTotals totals = ledger_totals(*ring, next_seq);
  std::cout << "[          ] " << kKills << " kills, " << killed_while_writing
            << " with a copy in flight; " << next_seq << " batches bound, " << totals.published
            << " published, " << totals.consumed << " consumed, " << totals.redelivered
            << " redelivered, slots adopted " << ring->header().slots_adopted.load() << std::endl;
  EXPECT_GE(killed_while_writing, kKills * 3 / 4) << "the kills should land mid-copy";
  EXPECT_EQ(drafter_entry.epoch.load(), 1u) << "the drafter must never have restarted";
  EXPECT_EQ(drafter_entry.torn.load(), 0u) << crash::read_file(dir.file("drafter.err"));
  EXPECT_EQ(totals.torn, 0u);
  EXPECT_EQ(totals.duplicated, 0u);
  EXPECT_EQ(totals.lost, 0u);
  EXPECT_GT(totals.consumed, uint64_t(kKills));
  // Nothing lost: every batch id the target bound was published (none is left WRITING).
  uint64_t unpublished = 0;
  for (uint64_t id = 0; id < next_seq; ++id)
    unpublished += (ring->ledger_entry(id)->flags.load() & kLedgerPublished) == 0;
  EXPECT_EQ(unpublished, 0u);
  // Nor is any left WRITING: given-back slots were adopted and written again.
  uint32_t left_writing = 0;
  for (uint32_t i = 0; i < ring->slot_count(); ++i)
    left_writing += SlotState(ring->slot(i).state.load()).phase() == SlotPhase::kWriting;
  EXPECT_EQ(left_writing, 0u);
  const uint32_t given_back = ring->target_progress(0).returned.load();
  std::cout << "[          ] publish " << publish << ": " << given_back
            << " slot(s) given back unread by the drafter" << std::endl;
  if (publish == "early") {
    EXPECT_GT(given_back, 0u) << "no kill landed while a copy was pending";
  }
  Ring::remove(name);
}

TEST(GpuCrashTest, TargetKilledMidCopyManyTimesDrafterNeverHangsNorSeesTornData) {
  HSRING_REQUIRE_GPUS(1);
  kill_target_mid_copy_many_times("after-copy", 0);
}

// The same kills with early publish and 30 ms copies: the drafter polls each slot's CUDA
// IPC event, and a slot whose target died before its copy completed goes back unread to
// the successor, which writes it again.
TEST(GpuCrashTest, EarlyPublishTargetKilledMidCopyDrafterNeverHangsNorSeesTornData) {
  HSRING_REQUIRE_GPUS(1);
  kill_target_mid_copy_many_times("early", 30'000);
}

}  // namespace
}  // namespace hsring
