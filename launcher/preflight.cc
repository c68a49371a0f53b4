#include "launcher/preflight.h"
#include "common/error.h"
#include "launcher/gpu_split.h"
#include "launcher/training_plan.h"

#include "model/model_config.h"
#include "model/target_model.h"
#include "train/dflash_blocks.h"
#include "train/dflash_config.h"
#include "train/dflash_params.h"
#include "train/same_position_config.h"
#include "train/same_position_params.h"

#include <sched.h>
#include <sys/statvfs.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <stdexcept>

#include "common/log.h"
#include "common/regular_file.h"
#include "drafter_proc/grad_exchange.h"
#include "gpu/gpu_ids.h"
#include "gpu/memlock.h"
#include "gpu/noise_schedule.h"
#include "shm/ring.h"
#if HSRING_HAVE_CUDA
#include "gpu/device.h"
#endif

namespace hsring {

namespace {

using gpu::human_bytes;

// Beside the ring, a CPU worker holds its binary, stacks and small buffers; a GPU worker
// also a CUDA context and cuBLAS, whose host-side allocations are a few hundred MiB.
constexpr uint64_t kCpuWorkerMemoryBytes = 64ull << 20;
constexpr uint64_t kGpuWorkerMemoryBytes = 1ull << 30;
// cgroup v1 says "no limit" with a huge number (PAGE_COUNTER_MAX pages).
constexpr uint64_t kNoCgroupLimit = 1ull << 62;

// ---- measuring ----

// The text of a /proc or cgroup file; "" when it cannot be read (the fact is then unknown).
std::string read_text(const std::filesystem::path& path) {
  constexpr size_t kMaxBytes = 1u << 20;  // these files are kilobytes
  try {
    return read_regular_file(path.string(), Errc::kSystem, kMaxBytes);
  } catch (const Error&) {
    return "";
  }
}

std::optional<uint64_t> parse_u64(const std::string& text) {
  size_t start = text.find_first_not_of(" \t\n");
  if (start == std::string::npos) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text.c_str() + start, &end, 10);
  if (errno != 0 || end == text.c_str() + start) return std::nullopt;
  return uint64_t(value);
}

// The value of `key` in "key value" lines (memory.stat).
std::optional<uint64_t> stat_value(const std::string& stat, const std::string& key) {
  std::istringstream lines(stat);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 &&
        line[key.size()] == ' ')
      return parse_u64(line.substr(key.size() + 1));
  }
  return std::nullopt;
}

// The path of this process's cgroup in hierarchy `controller` ("" for cgroup v2's "0::").
std::string own_cgroup(const std::string& controller) {
  std::istringstream lines(read_text("/proc/self/cgroup"));
  std::string line;
  while (std::getline(lines, line)) {
    const size_t first = line.find(':');
    const size_t second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const bool match =
        controller.empty()
            ? line.compare(0, 3, "0::") == 0
            : ("," + controllers + ",").find("," + controller + ",") != std::string::npos;
    if (match) return line.substr(second + 1);
  }
  return "";
}

uint64_t headroom(const CgroupMemory& m) { return m.limit > m.in_use ? m.limit - m.in_use : 0; }

// The tightest memory limit of this process's cgroup and its ancestors (v2), or of its
// memory cgroup (v1); nullopt when none is set.
std::optional<CgroupMemory> read_cgroup_memory() {
  std::optional<CgroupMemory> tightest;
  const auto consider = [&](const std::filesystem::path& dir, const char* limit,
                            const char* usage) {
    std::error_code ignored;
    if (!std::filesystem::exists(dir / limit, ignored)) return;
    const std::optional<CgroupMemory> m = parse_cgroup_memory(
        read_text(dir / limit), read_text(dir / usage), read_text(dir / "memory.stat"));
    if (m && (!tightest || headroom(*m) < headroom(*tightest))) tightest = m;
  };
  std::error_code ignored;
  const std::filesystem::path v2_root = "/sys/fs/cgroup";
  if (std::filesystem::exists(v2_root / "cgroup.controllers", ignored)) {
    // Inside a cgroup namespace the path may not exist under the mount: start at its root.
    std::filesystem::path dir = v2_root / std::filesystem::path(own_cgroup("")).relative_path();
    if (!std::filesystem::is_directory(dir, ignored)) dir = v2_root;
    for (;; dir = dir.parent_path()) {
      consider(dir, "memory.max", "memory.current");
      if (dir == v2_root || dir == dir.parent_path()) break;
    }
    return tightest;
  }
  const std::filesystem::path v1_root = "/sys/fs/cgroup/memory";
  const std::filesystem::path own =
      v1_root / std::filesystem::path(own_cgroup("memory")).relative_path();
  if (own != v1_root && std::filesystem::is_directory(own, ignored))
    consider(own, "memory.limit_in_bytes", "memory.usage_in_bytes");
  consider(v1_root, "memory.limit_in_bytes", "memory.usage_in_bytes");
  return tightest;
}

uint32_t cpus_of_this_process() {
  // Grow the set until the kernel's CPU mask fits (EINVAL while it is too small).
  for (int n = 1024; n <= (1 << 16); n *= 2) {
    cpu_set_t* set = CPU_ALLOC(n);
    if (set == nullptr) return 0;
    const size_t size = CPU_ALLOC_SIZE(n);
    const int rc = ::sched_getaffinity(0, size, set);
    const int count = rc == 0 ? CPU_COUNT_S(size, set) : 0;
    const int err = errno;
    CPU_FREE(set);
    if (rc == 0) return uint32_t(count);
    if (err != EINVAL) return 0;
  }
  return 0;
}

// ---- checking ----

uint32_t gpu_worker_count(const WorkerSpec& targets, const WorkerSpec& drafters) {
  return (targets.cpu ? 0 : targets.count) + (drafters.cpu ? 0 : drafters.count);
}

void check_cuda_build(const SystemFacts& facts) {
  if (facts.cuda_build) return;
  throw Error(Errc::kUsage,
              "GPU workers (--targets/--drafters with GPU ids) need a CUDA build of hsring; this "
              "build runs CPU workers only: use cpu:N");
}

// What the run puts in /dev/shm: the ring, and the gradient exchange beside it.
std::string segments_text(const RunOptions& options, const RingLayout& layout, uint64_t grads) {
  std::string text = "ring '" + options.ring + "' (" + human_bytes(layout.total_size) + ")";
  if (grads > 0)
    text += " and its gradient exchange '" + GradExchange::name_for(options.ring) + "' (" +
            human_bytes(grads) + ")";
  return text;
}

void check_shm_space(const RunOptions& options, const RingLayout& layout, uint64_t grads,
                     const SystemFacts& facts) {
  const uint64_t needed = layout.total_size + grads;
  if (!facts.shm_free_bytes || *facts.shm_free_bytes >= needed) return;
  const std::string what = grads > 0 ? segments_text(options, layout, grads) + " need "
                                     : "ring '" + options.ring + "' needs ";
  throw Error(Errc::kRing,
              fmt::format("{}{} but /dev/shm has {} free: remove stale rings (`hsring ring remove "
                          "NAME`), use fewer --slots or --max-tokens, or enlarge /dev/shm",
                          what, human_bytes(needed), human_bytes(*facts.shm_free_bytes)));
}

void check_memory(const RunOptions& options, const WorkerSpec& targets, const WorkerSpec& drafters,
                  const RingLayout& layout, uint64_t grads, const SystemFacts& facts) {
  if (!facts.mem_available) return;
  uint64_t workers_bytes = 0;
  for (uint32_t t = 0; t < targets.count; ++t)
    workers_bytes += worker_memory_estimate(options, Role::kTarget, !targets.cpu);
  for (uint32_t d = 0; d < drafters.count; ++d)
    workers_bytes += worker_memory_estimate(options, Role::kDrafter, !drafters.cpu);
  // /dev/shm is memory: its segments count with the workers.
  const uint64_t needed = layout.total_size + grads + workers_bytes;
  if (needed <= *facts.mem_available) return;
  throw Error(
      Errc::kSystem,
      fmt::format("{} and {} workers (about {}) need {} of memory, but only {} is available "
                  "({}): use fewer --slots or a smaller --max-tokens, fewer workers "
                  "(--targets, --drafters), or GPU workers for a large --model",
                  segments_text(options, layout, grads), targets.count + drafters.count,
                  human_bytes(workers_bytes), human_bytes(needed),
                  human_bytes(*facts.mem_available), facts.mem_available_source));
}

void check_gpus(const WorkerSpec& targets, const WorkerSpec& drafters, const SystemFacts& facts) {
  // In the order given, each id once: the first bad one is reported.
  std::set<int> seen;
  for (const std::vector<int>* ids : {&targets.gpus, &drafters.gpus}) {
    for (int id : *ids) {
      if (!seen.insert(id).second) continue;
      if (std::string missing = gpu::missing_gpu_problem(id, facts.gpu_count, facts.gpu_why_none);
          !missing.empty())
        throw Error(Errc::kUsage, missing);
      if (auto problem = facts.gpu_problems.find(id); problem != facts.gpu_problems.end())
        throw Error(Errc::kUsage, problem->second);
    }
  }
}

void check_slots(const RunOptions& options, const WorkerSpec& targets, const RingShape& shape) {
  // A GPU target keeps up to depth + 1 slots WRITING (one per capture buffer); drafters
  // wait for hs_min_ready READY slots on top of those, or the run could stall.
  const uint64_t per_target = targets.cpu ? 1 : uint64_t(options.target_postprocess_depth) + 1;
  const uint64_t needed = uint64_t(shape.hs_min_ready) + shape.num_targets * per_target;
  if (needed <= shape.slot_count) return;
  throw Error(Errc::kUsage,
              fmt::format("--hs-min-ready {} with {} target(s) that each keep up to {} slot(s) "
                          "in flight (--target-postprocess-depth {} + 1) needs {} slots, but the "
                          "ring has {}: raise --slots or lower --hs-min-ready or "
                          "--target-postprocess-depth",
                          shape.hs_min_ready, shape.num_targets, per_target,
                          options.target_postprocess_depth, needed, shape.slot_count));
}

// More workers than CPUs still runs (they time-share; the CPU tests run three workers on
// two cores), so that is a warning. A GPU worker's forward thread must launch the next
// batch while its GPU runs the current one: with fewer CPUs than GPU workers the GPUs wait
// on the scheduler and the run measures nothing of the data path, so that is an error.
void check_cpus(const WorkerSpec& targets, const WorkerSpec& drafters, const SystemFacts& facts,
                std::vector<std::string>& warnings) {
  if (facts.cpus == 0) return;
  const std::string cpus = fmt::format("{} {}", facts.cpus, facts.cpus == 1 ? "CPU" : "CPUs");
  const uint32_t gpu_workers = gpu_worker_count(targets, drafters);
  if (gpu_workers > facts.cpus)
    throw Error(Errc::kSystem,
                fmt::format("{} GPU workers need a CPU each to keep their GPUs fed, but this "
                            "process may run on {} (sched_getaffinity): allow more CPUs (taskset, "
                            "cpuset, systemd CPUAffinity=) or run fewer GPU workers (--targets, "
                            "--drafters)",
                            gpu_workers, cpus));
  const uint32_t workers = targets.count + drafters.count;
  if (workers > facts.cpus)
    warnings.push_back(
        fmt::format("{} workers will share {} (sched_getaffinity): they run, but "
                    "each gets less than a core; allow more CPUs or run fewer "
                    "workers (--targets, --drafters)",
                    workers, cpus));
}

}  // namespace

std::optional<uint64_t> meminfo_available_bytes(const std::string& meminfo) {
  const std::string key = "MemAvailable:";
  const size_t at = meminfo.find(key);
  if (at == std::string::npos) return std::nullopt;
  const std::optional<uint64_t> kib = parse_u64(meminfo.substr(at + key.size()));
  if (!kib) return std::nullopt;
  return *kib * 1024;  // the file says kB and means KiB
}

std::optional<CgroupMemory> parse_cgroup_memory(const std::string& limit, const std::string& usage,
                                                const std::string& stat) {
  const std::optional<uint64_t> bytes = parse_u64(limit);  // "max" does not parse: no limit
  if (!bytes || *bytes >= kNoCgroupLimit) return std::nullopt;
  CgroupMemory m;
  m.limit = *bytes;
  const uint64_t used = parse_u64(usage).value_or(0);
  // Page cache the kernel would reclaim is not in use: v1's hierarchical counter first,
  // then the plain one (v2's).
  const uint64_t inactive = stat_value(stat, "total_inactive_file")
                                .value_or(stat_value(stat, "inactive_file").value_or(0));
  m.in_use = used > inactive ? used - inactive : 0;
  return m;
}

uint64_t worker_memory_estimate(const RunOptions& options, Role role, bool on_gpu) {
  const uint64_t base = on_gpu ? kGpuWorkerMemoryBytes : kCpuWorkerMemoryBytes;
  if (!runs_model(options) || on_gpu) return base;  // GPU workers keep weights on the GPU
  ModelConfig target;
  try {
    target = model_outline_of(options.model);
  } catch (const std::exception&) {
    return base;  // the ring shape check reports a bad --model
  }
  if (role == Role::kTarget)  // a user command's own needs are unknown
    return options.target_cmd.empty() ? base + parameter_count(target) * sizeof(float) : base;
  // A CPU drafter keeps parameters, gradients and two AdamW moments in fp32.
  const uint32_t k = options.num_layers ? options.num_layers : kDefaultCapturedLayers;
  try {
    if (drafter_objective(options, false) == "dflash") {
      // Its parameters four times over, and the target's embedding and LM head it reads.
      const uint32_t layers =
          options.draft_layers ? options.draft_layers : train::default_draft_layers(target);
      const train::DflashConfig drafter =
          train::default_dflash_config(target, std::min(k, target.num_layers), layers);
      const uint64_t head =
          uint64_t(target.vocab_size) * target.hidden_size * (target.tie_embeddings ? 1 : 2);
      return base + (4 * train::dflash_param_layout(drafter).total + head) * sizeof(float);
    }
    const train::SamePositionConfig drafter =
        train::default_same_position_config(target, std::min(k, target.num_layers), options.window);
    return base + 4 * train::same_position_param_layout(drafter).total * sizeof(float);
  } catch (const std::exception&) {
    return base;
  }
}

uint64_t grad_exchange_bytes(const RunOptions& options, const WorkerSpec& drafters,
                             const RingShape& shape) {
  // Several CPU drafters of one machine train one model through the exchange; GPU
  // drafters all-reduce with NCCL, and across machines there is no exchange.
  if (!runs_model(options) || !drafters.cpu || drafters.count < 2 || options.nnodes > 1) return 0;
  try {
    const train::SamePositionConfig drafter = train::default_same_position_config(
        model_outline_of(options.model), shape.num_layers, options.window);
    return GradExchange::segment_size(drafters.count,
                                      train::same_position_param_layout(drafter).total);
  } catch (const std::exception&) {
    return 0;  // the ring shape check and the drafters report a bad --model
  }
}

namespace {

// --split auto's rates, from the run's target and its default drafter at the run's batch.
StageRates run_stage_rates(const RunOptions& options) {
  const ModelConfig target = model_outline_of(options.model);
  const uint32_t k = options.num_layers ? options.num_layers : kDefaultCapturedLayers;
  const uint32_t layers =
      options.draft_layers ? options.draft_layers : train::default_draft_layers(target);
  const train::DflashConfig drafter =
      train::default_dflash_config(target, std::min(k, target.num_layers), layers);
  const double tokens = options.max_tokens;
  const double anchors = options.anchors ? options.anchors : train::default_anchor_count(tokens);
  return estimate_stage_rates(target, drafter, tokens, anchors, kNominalGemmTflops);
}

}  // namespace

void apply_default_gpu_split(RunOptions& options, const SplitRequest& request) {
  int gpus = 0;
#if HSRING_HAVE_CUDA
  gpus = gpu::probe_gpus().count;
#endif
  if (gpus <= 0) return;
  int targets = 0;
  std::string why;
  if (gpus >= 2 && request.automatic && runs_model(options)) {
    try {
      const StageRates rates = run_stage_rates(options);
      targets = best_target_count(gpus, rates);
      why = fmt::format(
          "--split auto: per GPU, the target forwards about {:.1f} K tokens/s and a drafter "
          "trains on about {:.1f} K (from their shapes at {:.0f} TFLOP/s bf16 GEMMs and the "
          "shares hsring's kernels reach); {} target(s) : {} drafter(s) deliver about "
          "{:.1f} K tokens/s",
          rates.target / 1e3, rates.drafter / 1e3, kNominalGemmTflops, targets, gpus - targets,
          std::min(targets * rates.target, (gpus - targets) * rates.drafter) / 1e3);
    } catch (const std::exception&) {
      targets = 0;  // the ring shape check reports a bad --model; the ratio stands in
    }
  }
  if (gpus >= 2 && targets == 0) {
    const int t = request.automatic ? 5 : request.targets;
    const int d = request.automatic ? 3 : request.drafters;
    targets = ratio_target_count(gpus, t, d);
    why = fmt::format("--split {}:{}", t, d);
  }
  const std::optional<WorkerSplit> split = gpu_split(gpus, targets);
  if (!split) return;
  options.targets = split->targets;
  options.drafters = split->drafters;
  if (!why.empty()) log_line(why);
  log_line(
      fmt::format("using all {} GPU(s): targets on {}, drafters on {} (--targets / "
                  "--drafters choose otherwise)",
                  gpus, split->targets, split->drafters));
}

SystemFacts measure_system_facts(const WorkerSpec& targets, const WorkerSpec& drafters) {
  SystemFacts facts;
#if HSRING_HAVE_CUDA
  facts.cuda_build = true;
#endif
  struct statvfs fs {};
  if (::statvfs("/dev/shm", &fs) == 0) facts.shm_free_bytes = uint64_t(fs.f_bavail) * fs.f_frsize;
  facts.memlock_limit = gpu::memlock_limit_bytes();
  facts.cpus = cpus_of_this_process();

  facts.mem_available = meminfo_available_bytes(read_text("/proc/meminfo"));
  facts.mem_available_source = "MemAvailable in /proc/meminfo";
  if (const std::optional<CgroupMemory> cgroup = read_cgroup_memory();
      cgroup && (!facts.mem_available || headroom(*cgroup) < *facts.mem_available)) {
    facts.mem_available = headroom(*cgroup);
    facts.mem_available_source = "this cgroup's memory limit " + human_bytes(cgroup->limit) + ", " +
                                 human_bytes(cgroup->in_use) + " of it in use";
  }

#if HSRING_HAVE_CUDA
  if (gpu_worker_count(targets, drafters) > 0) {
    const gpu::GpuInventory inventory = gpu::probe_gpus();
    facts.gpu_count = inventory.count;
    facts.gpu_why_none = inventory.why_none;
    for (const std::vector<int>* ids : {&targets.gpus, &drafters.gpus}) {
      for (int id : *ids) {
        if (id < 0 || id >= inventory.count || facts.gpu_problems.count(id)) continue;
        if (std::string problem = gpu::gpu_problem(id, inventory); !problem.empty())
          facts.gpu_problems[id] = problem;
      }
    }
  }
#else
  (void)targets;
  (void)drafters;
#endif
  return facts;
}

std::vector<std::string> check_run_request(const RunOptions& options, const WorkerSpec& targets,
                                           const WorkerSpec& drafters, const RingShape& shape,
                                           const SystemFacts& facts) {
  std::vector<std::string> warnings;
  const RingLayout layout = compute_layout(shape);
  const bool gpu_workers = gpu_worker_count(targets, drafters) > 0;
  if (gpu_workers) check_cuda_build(facts);
  const uint64_t grads = grad_exchange_bytes(options, drafters, shape);
  check_shm_space(options, layout, grads, facts);
  check_memory(options, targets, drafters, layout, grads, facts);
  if (gpu_workers) {
    // Every GPU worker pins every slot's payload (gpu/host_registration.h).
    const uint64_t pinned = layout.slot.stride * shape.slot_count;
    if (std::string problem =
            gpu::memlock_problem(pinned, "ring '" + options.ring + "'", facts.memlock_limit);
        !problem.empty())
      throw Error(Errc::kSystem, problem);
    check_gpus(targets, drafters, facts);
    check_slots(options, targets, shape);
    if (!drafters.cpu) (void)gpu::parse_noise_schedule(options.noise_schedule, options.noise_std);
  }
  check_cpus(targets, drafters, facts, warnings);
  return warnings;
}

void preflight_run(const RunOptions& options, const WorkerSpec& targets, const WorkerSpec& drafters,
                   const RingShape& shape) {
  const SystemFacts facts = measure_system_facts(targets, drafters);
  for (const std::string& warning : check_run_request(options, targets, drafters, shape, facts))
    log_line("warning: " + warning);
}

}  // namespace hsring
