// Every refusal of `hsring run`'s preflight (launcher/preflight.h), driven with made-up
// machine facts: a full /dev/shm, too little memory, a low memlock limit, a GPU that does
// not exist or cannot pin, no CUDA, too few slots, a bad noise schedule, too few CPUs.
// Each is one line that names what to change. Also the readers of the memory facts and
// the facts of this machine.
#include "launcher/preflight.h"
#include "launcher/gpu_split.h"

#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <type_traits>

#include "common/error.h"
#include "shm/ring.h"

namespace hsring {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

// A machine that serves any small request: plenty of everything, four GPUs.
SystemFacts roomy_machine() {
  SystemFacts facts;
  facts.cuda_build = true;
  facts.shm_free_bytes = 64 * kGiB;
  facts.memlock_limit = UINT64_MAX;
  facts.cpus = 64;
  facts.mem_available = 256 * kGiB;
  facts.mem_available_source = "MemAvailable in /proc/meminfo";
  facts.gpu_count = 4;
  return facts;
}

// The random tiny preset, so no check depends on the built-in target's cache.
RunOptions tiny_run() {
  RunOptions o;
  o.model = "tiny";
  return o;
}

struct Request {
  RunOptions options = tiny_run();
  std::string targets = "cpu:2";
  std::string drafters = "cpu:1";
};

std::vector<std::string> check(const Request& r, const SystemFacts& facts) {
  const WorkerSpec targets = parse_worker_spec(r.targets, "--targets");
  const WorkerSpec drafters = parse_worker_spec(r.drafters, "--drafters");
  return check_run_request(r.options, targets, drafters,
                           ring_shape_of(r.options, targets, drafters), facts);
}

// The message of the refusal, which must be of type E and one line long: Error is a bad
// request (Errc::kUsage), std::runtime_error a machine that cannot run it (no usage error).
template <typename E>
std::string refusal(const Request& r, const SystemFacts& facts) {
  try {
    check(r, facts);
  } catch (const E& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
    const auto* error = dynamic_cast<const Error*>(&e);
    EXPECT_EQ(error != nullptr && error->code() == Errc::kUsage, (std::is_same_v<E, Error>))
        << "refused with the wrong class: " << message;
    return message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "refused with the wrong exception type: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "not refused";
  return "";
}

Request gpu_request() {
  Request r;
  r.targets = "0,1";
  r.drafters = "2";
  r.options.slots = 16;
  return r;
}

TEST(PreflightTest, ARoomyMachineServesCpuAndGpuRequests) {
  EXPECT_TRUE(check(Request{}, roomy_machine()).empty());
  EXPECT_TRUE(check(gpu_request(), roomy_machine()).empty());
}

TEST(PreflightTest, UnknownFactsAreNotRefusals) {
  SystemFacts facts = roomy_machine();
  facts.shm_free_bytes.reset();
  facts.mem_available.reset();
  facts.cpus = 0;
  EXPECT_TRUE(check(Request{}, facts).empty());
}

TEST(PreflightTest, DevShmFull) {
  SystemFacts facts = roomy_machine();
  facts.shm_free_bytes = 1 * kMiB;
  const std::string m = refusal<std::runtime_error>(Request{}, facts);
  EXPECT_NE(m.find("/dev/shm has 1 MiB free"), std::string::npos) << m;
  EXPECT_NE(m.find("--slots or --max-tokens"), std::string::npos) << m;
  EXPECT_NE(m.find("hsring ring remove"), std::string::npos) << m;
}

// Several CPU drafters training a model average their gradients through "<ring>-grads",
// a second segment in /dev/shm: the space check counts it.
TEST(PreflightTest, DevShmMustHoldTheGradientExchangeToo) {
  Request r;
  r.options.model = "tiny";
  r.drafters = "cpu:3";
  const WorkerSpec targets = parse_worker_spec(r.targets, "--targets");
  const WorkerSpec drafters = parse_worker_spec(r.drafters, "--drafters");
  const RingShape shape = ring_shape_of(r.options, targets, drafters);
  const uint64_t ring_bytes = compute_layout(shape).total_size;
  const uint64_t grads = grad_exchange_bytes(r.options, drafters, shape);
  // Two buffers of the tiny drafter's ~312 K fp32 gradients per member.
  EXPECT_GT(grads, 3 * 2 * 300'000 * sizeof(float));

  SystemFacts facts = roomy_machine();
  facts.shm_free_bytes = ring_bytes + grads;  // exactly enough
  EXPECT_TRUE(check(r, facts).empty());
  facts.shm_free_bytes = ring_bytes + grads - 1;  // room for the ring alone
  const std::string m = refusal<std::runtime_error>(r, facts);
  EXPECT_NE(m.find("and its gradient exchange '" + r.options.ring + "-grads'"), std::string::npos)
      << m;
  EXPECT_NE(m.find("/dev/shm has"), std::string::npos) << m;

  // No exchange: one drafter, GPU drafters (NCCL), synthetic batches.
  EXPECT_EQ(grad_exchange_bytes(r.options, parse_worker_spec("cpu:1", "--drafters"), shape), 0u);
  EXPECT_EQ(grad_exchange_bytes(r.options, parse_worker_spec("1,2", "--drafters"), shape), 0u);
  Request synthetic = r;
  synthetic.options.model = "synthetic";
  EXPECT_EQ(grad_exchange_bytes(synthetic.options, drafters,
                                ring_shape_of(synthetic.options, targets, drafters)),
            0u);
}

TEST(PreflightTest, TooLittleMemoryNamesBothNumbersAndWhatToChange) {
  Request r;
  r.options.model = "synthetic";
  r.options.slots = 64;
  r.options.max_tokens = 4096;  // 64 x 4096 tokens x 5 x 256 x bf16: 640 MiB of payload
  const WorkerSpec targets = parse_worker_spec(r.targets, "--targets");
  const WorkerSpec drafters = parse_worker_spec(r.drafters, "--drafters");
  const uint64_t ring_bytes =
      compute_layout(ring_shape_of(r.options, targets, drafters)).total_size;
  const uint64_t workers_bytes = 3 * worker_memory_estimate(r.options, Role::kTarget, false);

  SystemFacts facts = roomy_machine();
  facts.mem_available = ring_bytes + workers_bytes;  // exactly enough
  EXPECT_TRUE(check(r, facts).empty());
  facts.mem_available = ring_bytes + workers_bytes - 1;
  refusal<std::runtime_error>(r, facts);
  facts.mem_available = 512 * kMiB;
  const std::string m = refusal<std::runtime_error>(r, facts);
  EXPECT_NE(m.find("only 512 MiB is available (MemAvailable in /proc/meminfo)"), std::string::npos)
      << m;
  EXPECT_NE(m.find("and 3 workers (about 192 MiB) need"), std::string::npos) << m;
  EXPECT_NE(m.find("fewer --slots or a smaller --max-tokens, fewer workers"), std::string::npos)
      << m;
}

// A CPU target holds its model's fp32 weights, a CPU drafter four copies of its own
// parameters: qwen3-8b on CPU targets needs 33 GB each, refused on a 24 GiB machine.
TEST(PreflightTest, CpuModelWorkersCountTheirWeights) {
  Request r;
  r.options.model = "tiny";
  const uint64_t tiny_target = worker_memory_estimate(r.options, Role::kTarget, false);
  const uint64_t tiny_drafter = worker_memory_estimate(r.options, Role::kDrafter, false);
  EXPECT_GT(tiny_target, 64ull << 20);   // the base plus 1.2 M fp32 weights
  EXPECT_GT(tiny_drafter, 64ull << 20);  // the base plus 4 x 312 K drafter floats
  EXPECT_EQ(worker_memory_estimate(r.options, Role::kTarget, true), 1ull << 30);
  r.options.model = "qwen3-8b";
  EXPECT_GT(worker_memory_estimate(r.options, Role::kTarget, false), 30 * kGiB);  // 8.2 B x 4 bytes
  SystemFacts facts = roomy_machine();
  facts.mem_available = 24 * kGiB;
  const std::string m = refusal<std::runtime_error>(r, facts);
  EXPECT_NE(m.find("GPU workers for a large --model"), std::string::npos) << m;
}

TEST(PreflightTest, TooLittleMemoryUnderACgroupLimitSaysSo) {
  SystemFacts facts = roomy_machine();
  facts.mem_available = 8 * kMiB;
  facts.mem_available_source = "this cgroup's memory limit 1.0 GiB, 1016 MiB of it in use";
  const std::string m = refusal<std::runtime_error>(Request{}, facts);
  EXPECT_NE(m.find("only 8 MiB is available (this cgroup's memory limit 1.0 GiB"),
            std::string::npos)
      << m;
}

TEST(PreflightTest, GpuWorkersCountAGigabyteEachInTheMemoryCheck) {
  SystemFacts facts = roomy_machine();
  facts.mem_available = 2 * kGiB;  // the ring is small; three GPU workers are not
  const std::string m = refusal<std::runtime_error>(gpu_request(), facts);
  EXPECT_NE(m.find("3 workers (about 3.0 GiB)"), std::string::npos) << m;
}

TEST(PreflightTest, MemlockTooLowForGpuWorkers) {
  SystemFacts facts = roomy_machine();
  facts.memlock_limit = 64 * 1024;
  const std::string m = refusal<std::runtime_error>(gpu_request(), facts);
  EXPECT_NE(m.find("may lock only 64 KiB"), std::string::npos) << m;
  EXPECT_NE(m.find("ulimit -l"), std::string::npos) << m;
  EXPECT_NE(m.find("LimitMEMLOCK=infinity"), std::string::npos) << m;
  // CPU workers pin nothing.
  EXPECT_TRUE(check(Request{}, facts).empty());
}

TEST(PreflightTest, NonexistentGpu) {
  SystemFacts facts = roomy_machine();
  facts.gpu_count = 2;
  const std::string m = refusal<Error>(gpu_request(), facts);
  EXPECT_EQ(m, "GPU 2 does not exist: this machine has 2 GPUs (0-1)");
}

TEST(PreflightTest, NoGpuAtAll) {
  SystemFacts facts = roomy_machine();
  facts.gpu_count = 0;
  facts.gpu_why_none = "no CUDA-capable device is detected (cudaErrorNoDevice)";
  const std::string m = refusal<Error>(gpu_request(), facts);
  EXPECT_NE(m.find("GPU 0 does not exist: this machine has no usable GPU (no CUDA-capable"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("use cpu:N workers"), std::string::npos) << m;
}

TEST(PreflightTest, GpuThatCannotPinHostMemory) {
  SystemFacts facts = roomy_machine();
  facts.gpu_problems[1] = "GPU 1 (X) cannot register host memory; run its worker on another GPU";
  EXPECT_EQ(refusal<Error>(gpu_request(), facts), facts.gpu_problems[1]);
}

TEST(PreflightTest, GpuWorkersNeedACudaBuild) {
  SystemFacts facts = roomy_machine();
  facts.cuda_build = false;
  const std::string m = refusal<Error>(gpu_request(), facts);
  EXPECT_NE(m.find("need a CUDA build"), std::string::npos) << m;
  EXPECT_NE(m.find("use cpu:N"), std::string::npos) << m;
}

TEST(PreflightTest, TooFewSlotsForInFlightGpuBatches) {
  Request r = gpu_request();
  r.options.slots = 4;
  r.options.hs_min_ready = 2;
  r.options.target_postprocess_depth = 2;
  const std::string m = refusal<Error>(r, roomy_machine());
  EXPECT_NE(m.find("--hs-min-ready 2 with 2 target(s)"), std::string::npos) << m;
  EXPECT_NE(m.find("needs 8 slots, but the ring has 4: raise --slots"), std::string::npos) << m;
}

TEST(PreflightTest, BadNoiseSchedule) {
  Request r = gpu_request();
  r.options.noise_schedule = "cubic";
  const std::string m = refusal<Error>(r, roomy_machine());
  EXPECT_NE(m.find("--noise-schedule 'cubic'"), std::string::npos) << m;
}

TEST(PreflightTest, FewerCpusThanGpuWorkersIsAnError) {
  SystemFacts facts = roomy_machine();
  facts.cpus = 2;
  const std::string m = refusal<std::runtime_error>(gpu_request(), facts);
  EXPECT_NE(m.find("3 GPU workers need a CPU each"), std::string::npos) << m;
  EXPECT_NE(m.find("may run on 2 CPUs (sched_getaffinity)"), std::string::npos) << m;
  EXPECT_NE(m.find("allow more CPUs"), std::string::npos) << m;
  EXPECT_NE(m.find("fewer GPU workers"), std::string::npos) << m;
}

TEST(PreflightTest, MoreCpuWorkersThanCpusIsOnlyAWarning) {
  SystemFacts facts = roomy_machine();
  facts.cpus = 2;
  const std::vector<std::string> warnings = check(Request{}, facts);  // 3 workers, 2 CPUs
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("3 workers will share 2 CPUs"), std::string::npos) << warnings[0];
  facts.cpus = 3;
  EXPECT_TRUE(check(Request{}, facts).empty());
}

TEST(PreflightTest, MemAvailableIsReadInKiB) {
  EXPECT_EQ(
      meminfo_available_bytes("MemTotal:  100 kB\nMemFree:  50 kB\nMemAvailable:   24255640 kB\n"),
      24255640ull * 1024);
  EXPECT_EQ(meminfo_available_bytes("MemTotal: 100 kB\n"), std::nullopt);
}

TEST(PreflightTest, CgroupLimitLessWhatItCannotReclaim) {
  // v2: no limit.
  EXPECT_EQ(parse_cgroup_memory("max\n", "123\n", ""), std::nullopt);
  // v1's "no limit" is a huge number.
  EXPECT_EQ(parse_cgroup_memory("9223372036854771712\n", "448278528\n", ""), std::nullopt);
  // v2: 4 GiB limit, 3 GiB charged of which 1 GiB is inactive page cache.
  const auto v2 = parse_cgroup_memory("4294967296\n", "3221225472\n",
                                      "anon 1\nfile 2\nactive_file 5\ninactive_file 1073741824\n");
  ASSERT_TRUE(v2);
  EXPECT_EQ(v2->limit, 4 * kGiB);
  EXPECT_EQ(v2->in_use, 2 * kGiB);
  // v1: the hierarchical counter wins over this cgroup's own.
  const auto v1 = parse_cgroup_memory("1073741824", "536870912",
                                      "inactive_file 1\ntotal_inactive_file 268435456\n");
  ASSERT_TRUE(v1);
  EXPECT_EQ(v1->in_use, 256 * kMiB);
  // More cache than usage (racy reads) is nothing in use, not a wrap-around.
  EXPECT_EQ(parse_cgroup_memory("100", "10", "inactive_file 20\n")->in_use, 0u);
}

TEST(PreflightTest, ThisMachinesFactsAreMeasured) {
  const SystemFacts facts = measure_system_facts(parse_worker_spec("cpu:2", "--targets"),
                                                 parse_worker_spec("cpu:1", "--drafters"));
  EXPECT_GT(facts.cpus, 0u);
  EXPECT_TRUE(facts.shm_free_bytes.has_value());
  ASSERT_TRUE(facts.mem_available.has_value());
  EXPECT_GT(*facts.mem_available, 0u);
  EXPECT_FALSE(facts.mem_available_source.empty());
  EXPECT_GT(facts.memlock_limit, 0u);
}

}  // namespace
}  // namespace hsring

namespace hsring {
namespace {

// `hsring run` without --targets / --drafters on a GPU machine, --split 5:3: every GPU, 5:3.
TEST(DefaultGpuSplitTest, EveryGpuTargetsToDraftersFiveToThree) {
  const auto five_to_three = [](int gpus) {
    return gpu_split(gpus, gpus >= 2 ? ratio_target_count(gpus, 5, 3) : 1);
  };
  EXPECT_FALSE(five_to_three(0)) << "no GPU: the CPU defaults stay";
  const auto split = [&](int gpus) {
    const std::optional<WorkerSplit> s = five_to_three(gpus);
    return s ? s->targets + " | " + s->drafters : std::string("none");
  };
  EXPECT_EQ(split(1), "0 | 0");
  EXPECT_EQ(split(2), "0 | 1");
  EXPECT_EQ(split(3), "0,1 | 2");
  EXPECT_EQ(split(4), "0,1,2 | 3");
  EXPECT_EQ(split(8), "0,1,2,3,4 | 5,6,7");
  EXPECT_EQ(split(16), "0,1,2,3,4,5,6,7,8,9 | 10,11,12,13,14,15");
  for (int gpus = 2; gpus <= 64; ++gpus) {
    const WorkerSplit s = *five_to_three(gpus);
    const WorkerSpec targets = parse_worker_spec(s.targets, "--targets");
    const WorkerSpec drafters = parse_worker_spec(s.drafters, "--drafters");
    EXPECT_GE(targets.gpus.size(), 1u);
    EXPECT_GE(drafters.gpus.size(), 1u);
    EXPECT_EQ(targets.gpus.size() + drafters.gpus.size(), size_t(gpus)) << "every GPU, once";
    const double ratio = double(targets.gpus.size()) / double(gpus);
    EXPECT_NEAR(ratio, 5.0 / 8.0, 0.5 / gpus + 1e-9) << gpus << " GPUs";
  }
}

// A Qwen3.5 hybrid target: full-attention layers captured by default (the published DFlash
// ids for the 27B shape), on CPU and GPU targets alike (both forwards run it).
TEST(PreflightTest, HybridTargetsCaptureAttentionLayers) {
  RunOptions o;
  o.model = "qwen3.6-27b";
  const WorkerSpec drafters = parse_worker_spec("cpu:1", "--drafters");
  for (const char* targets : {"cpu:1", "0"}) {
    const RingShape shape = ring_shape_of(o, parse_worker_spec(targets, "--targets"), drafters);
    ASSERT_EQ(shape.num_layers, 5u) << targets;
    EXPECT_EQ(std::vector<int32_t>(shape.layer_ids, shape.layer_ids + 5),
              (std::vector<int32_t>{3, 15, 31, 47, 59}))
        << targets;
  }
}

}  // namespace
}  // namespace hsring
