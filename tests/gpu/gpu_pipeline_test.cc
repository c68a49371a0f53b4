// The GPU target pipeline and the GPU drafter in one process, each with its own session
// and its own mapping of the ring, as two processes would have: every element of every
// batch verified on the drafter's GPU, in the split and concatenated layouts, on one GPU
// and across two, and the capture-buffer guard shown to matter by delaying copies on
// purpose. Skipped, with the reason, without a GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "drafter_proc/gpu_drafter_worker.h"
#include "gpu/host_registration.h"
#include "gpu/philox.h"
#include "shm/futex.h"
#include "shm/ledger.h"
#include "target_proc/gpu_pipeline.h"
#include "target_proc/target_worker.h"
#include "tests/crash/process_util.h"
#include "tests/gpu/gpu_test_util.h"

namespace hsring {
namespace {

RingShape small_shape(uint64_t batches) {
  RingShape s;
  s.slot_count = 8;
  s.max_tokens = 1024;
  s.hidden_size = 512;
  s.num_layers = 5;
  s.num_targets = 1;
  s.num_drafters = 1;
  s.hs_min_ready = 1;
  s.batch_limit = batches;
  s.ledger_capacity = 1 << 16;
  for (uint32_t k = 0; k < s.num_layers; ++k) s.layer_ids[k] = int32_t(k);
  return s;
}

struct PipelineRun {
  uint64_t consumed = 0;
  uint64_t drafter_torn = 0;
  int target_exit = -1;
  std::string error;
  LedgerTotals totals;
  StageCounter* forward = nullptr;
  uint64_t copies = 0, forwards = 0, gaps = 0;
  uint64_t gap_max_ns = 0;
  uint64_t copies_awaited = 0;  // early publish: claims made while the copy still ran
  // The drafter's last batch, copied to the host after its noise: for the noise check.
  std::vector<uint16_t> last_batch;
  uint64_t last_batch_id = 0, last_step = 0;
  uint32_t last_tokens = 0;
};

// Runs one GPU target and one GPU drafter over a fresh ring until the drafter has consumed
// shape.batch_limit batches (or 120 s pass), then drains the ring.
PipelineRun run_pipeline(const RingShape& shape, GpuTargetOptions target_options,
                         GpuDrafterOptions drafter_options) {
  PipelineRun result;
  const std::string name = crash::unique_ring_name();
  auto ring = Ring::create(name, shape);
  std::atomic<bool> drafter_done{false};
  std::mutex error_mutex;
  auto report = [&](const std::string& what) {
    std::lock_guard lock(error_mutex);
    result.error += what + "\n";
  };

  std::thread target([&] {
    try {
      gpu::use_gpu(target_options.gpu);
      auto session =
          WorkerSession::start(Ring::attach(name), 0, Role::kTarget, std::chrono::seconds(2));
      auto pinned = gpu::pin_ring_payload(session->ring());
      BatchProducer producer(*session);
      auto pipeline = GpuTargetPipeline::create(producer, target_options);
      result.target_exit = TargetWorker(*session, producer, *pipeline, {}).run();
    } catch (const std::exception& e) {
      report(std::string("target: ") + e.what());
      drafter_done = true;
    }
  });
  std::thread drafter([&] {
    try {
      gpu::use_gpu(drafter_options.gpu);
      auto session = WorkerSession::start(Ring::attach(name), shape.num_targets, Role::kDrafter,
                                          std::chrono::seconds(2));
      auto pinned = gpu::pin_ring_payload(session->ring());
      auto worker = GpuDrafterWorker::create(*session, drafter_options);
      const uint64_t deadline = monotonic_ns() + 120'000'000'000ull;
      while (worker->consumed() < shape.batch_limit && monotonic_ns() < deadline && !drafter_done) {
        const auto r = worker->step(std::chrono::milliseconds(50));
        if (r == GpuDrafterWorker::StepResult::kLostSlot ||
            r == GpuDrafterWorker::StepResult::kFailed) {
          report("drafter step failed");
          break;
        }
      }
      if (!worker->finish()) report("drafter finish failed");
      result.consumed = worker->consumed();
      result.drafter_torn = worker->torn();
      result.copies_awaited = worker->copies_awaited();
      if (worker->consumed() > 0) {
        result.last_tokens = worker->last_tokens();
        result.last_batch_id = worker->last_batch_id();
        result.last_step = worker->last_step();
        result.last_batch.resize(uint64_t(result.last_tokens) * shape.num_layers *
                                 shape.hidden_size);
        HSRING_CUDA_CHECK(cudaMemcpy(result.last_batch.data(), worker->last_batch(),
                                     result.last_batch.size() * 2, cudaMemcpyDeviceToHost));
      }
    } catch (const std::exception& e) {
      report(std::string("drafter: ") + e.what());
    }
    drafter_done = true;
  });
  drafter.join();
  ring->header().run_state.store(uint32_t(RunState::kDraining), std::memory_order_release);
  SharedCondition(ring->header().free_futex, ring->header().free_waiters).notify_all();
  SharedCondition(ring->header().ready_futex, ring->header().ready_waiters).notify_all();
  target.join();
  result.totals = ledger_totals(*ring, shape.batch_limit);
  const ProcessEntry& t = ring->process(0);
  result.copies = t.stages[uint32_t(Stage::kTargetCopy)].count.load();
  result.forwards = t.stages[uint32_t(Stage::kTargetForward)].count.load();
  result.gaps = t.stages[uint32_t(Stage::kTargetEnqueue)].count.load();
  result.gap_max_ns = t.stages[uint32_t(Stage::kTargetEnqueue)].max_ns.load();
  Ring::remove(name);
  return result;
}

void expect_every_batch_intact(const PipelineRun& r, uint64_t batches) {
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.target_exit, 0);
  EXPECT_EQ(r.consumed, batches);
  EXPECT_EQ(r.drafter_torn, 0u) << "the drafter's GPU found elements that differ";
  EXPECT_EQ(r.totals.published, batches);
  EXPECT_EQ(r.totals.consumed, batches);
  EXPECT_EQ(r.totals.torn, 0u);
  EXPECT_EQ(r.totals.duplicated, 0u);
  EXPECT_EQ(r.totals.lost, 0u);
  EXPECT_EQ(r.copies, batches) << "every batch's copy is timed";
  EXPECT_EQ(r.forwards, batches);
}

TEST(GpuPipelineTest, OneGpuSplitLayersEveryElementVerified) {
  HSRING_REQUIRE_GPUS(1);
  const uint64_t n = 60;
  GpuTargetOptions t;
  GpuDrafterOptions d;
  expect_every_batch_intact(run_pipeline(small_shape(n), t, d), n);
}

TEST(GpuPipelineTest, OneGpuConcatenatedLayersEveryElementVerified) {
  HSRING_REQUIRE_GPUS(1);
  const uint64_t n = 60;
  RingShape shape = small_shape(n);
  shape.split_layers = 0;
  shape.dtype = DType::kFP16;
  expect_every_batch_intact(run_pipeline(shape, {}, {}), n);
}

TEST(GpuPipelineTest, StagedAssemblyAndDeeperPostprocess) {
  HSRING_REQUIRE_GPUS(1);
  const uint64_t n = 60;
  GpuTargetOptions t;
  t.postprocess_depth = 3;
  GpuDrafterOptions d;
  d.assembly = GpuDrafterOptions::Assembly::kStagedCopy;
  RingShape shape = small_shape(n);
  shape.dtype = DType::kFP32;
  expect_every_batch_intact(run_pipeline(shape, t, d), n);
}

TEST(GpuPipelineTest, TwoGpusSplitAndConcatenated) {
  HSRING_REQUIRE_GPUS(2);
  const uint64_t n = 60;
  GpuTargetOptions t;
  t.gpu = 0;
  GpuDrafterOptions d;
  d.gpu = 1;
  expect_every_batch_intact(run_pipeline(small_shape(n), t, d), n);
  RingShape concatenated = small_shape(n);
  concatenated.split_layers = 0;
  expect_every_batch_intact(run_pipeline(concatenated, t, d), n);
}

// Copies delayed by 20 ms on the GPU while forwards take microseconds: a forward that
// reused a capture buffer before its copy finished would overwrite it, and the drafter's
// check would see another batch's elements. The guard makes the target wait instead.
TEST(GpuPipelineTest, CaptureBufferNeverOverwrittenWhileBeingCopied) {
  HSRING_REQUIRE_GPUS(1);
  const uint64_t n = 16;
  GpuTargetOptions t;
  t.debug_copy_delay_us = 20'000;
  const PipelineRun r = run_pipeline(small_shape(n), t, {});
  expect_every_batch_intact(r, n);
  EXPECT_GT(r.gaps, 0u);
  EXPECT_GE(r.gap_max_ns, 10'000'000u) << "the target never waited for a buffer under copy";
}

// Early publish: slots go READY as soon as their (20 ms delayed) copies are enqueued, so a
// drafter that read before polling the CUDA IPC event complete would see torn batches.
TEST(GpuPipelineTest, EarlyPublishDrafterReadsOnlyAfterTheCopyEvent) {
  HSRING_REQUIRE_GPUS(1);
  const uint64_t n = 16;
  GpuTargetOptions t;
  t.debug_copy_delay_us = 20'000;
  t.early_publish = true;
  const PipelineRun r = run_pipeline(small_shape(n), t, {});
  expect_every_batch_intact(r, n);
  // Most claims find the copy running (it takes 20 ms, the rest microseconds): those reads
  // waited for the event.
  EXPECT_GE(r.copies_awaited, n / 2) << "slots were not published before their copies ended";
}

// The same with the split layout replaced by the concatenated one and a deeper pipeline.
TEST(GpuPipelineTest, EarlyPublishConcatenatedDeeperPostprocess) {
  HSRING_REQUIRE_GPUS(1);
  const uint64_t n = 24;
  RingShape shape = small_shape(n);
  shape.split_layers = 0;
  GpuTargetOptions t;
  t.early_publish = true;
  t.postprocess_depth = 3;
  t.debug_copy_delay_us = 5'000;
  expect_every_batch_intact(run_pipeline(shape, t, {}), n);
}

// The control: the same delay with the guard turned off (buffers handed back when the
// copy is enqueued) must be caught as torn batches, or the test above proves nothing.
TEST(GpuPipelineTest, WithoutTheGuardTheDelayedCopyIsCaughtTorn) {
  HSRING_REQUIRE_GPUS(1);
  const uint64_t n = 16;
  GpuTargetOptions t;
  t.debug_copy_delay_us = 20'000;
  t.debug_unsafe_early_reuse = true;
  RingShape shape = small_shape(n);
  shape.slot_count = 12;
  const PipelineRun r = run_pipeline(shape, t, {});
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.consumed, n);
  EXPECT_GT(r.drafter_torn, 0u) << "overwritten capture buffers went unnoticed";
  EXPECT_EQ(r.totals.torn, r.drafter_torn);
}

// Verification runs before the noise (else every batch would be torn), and the noise is
// the counter-based Gaussian of (seed, step): the drafter's last batch equals the host's
// synthetic batch plus the host's noise, to one bf16 ulp.
TEST(GpuPipelineTest, NoiseFollowsVerificationAndIsReproducibleFromSeedAndStep) {
  HSRING_REQUIRE_GPUS(1);
  const uint64_t n = 12;
  GpuDrafterOptions d;
  d.seed = 99;
  d.noise = gpu::parse_noise_schedule("linear:0.5,0.1,8", 0);
  const RingShape shape = small_shape(n);
  const PipelineRun r = run_pipeline(shape, {}, d);
  expect_every_batch_intact(r, n);
  ASSERT_FALSE(r.last_batch.empty());
  const float std = float(d.noise.std_at(r.last_step));
  const uint32_t layers = shape.num_layers, hidden = shape.hidden_size;
  uint64_t exact = 0;
  for (uint64_t i = 0; i < r.last_batch.size(); ++i) {
    const uint32_t t = uint32_t(i / (uint64_t(layers) * hidden));
    const uint32_t k = uint32_t(i / hidden % layers), dim = uint32_t(i % hidden);
    float noise[4];
    gpu::gaussian4(99, r.last_step, i / 4, noise);
    const float clean =
        gpu_test::bf16_to_float(uint16_t(synthetic_element_bits(r.last_batch_id, k, t, dim, 2)));
    const uint16_t want = gpu_test::float_to_bf16(clean + std * noise[i % 4]);
    const float g = gpu_test::bf16_to_float(r.last_batch[i]), w = gpu_test::bf16_to_float(want);
    ASSERT_LE(std::fabs(g - w), gpu_test::noise_tolerance(g, w, clean, std * noise[i % 4]))
        << "element " << i;
    exact += r.last_batch[i] == want;
  }
  EXPECT_GE(double(exact), 0.999 * double(r.last_batch.size()));
}

}  // namespace
}  // namespace hsring
