#include "launcher/preflight.h"

#include <sys/statvfs.h>

#include <set>
#include <stdexcept>

#include "gpu/memlock.h"
#include "gpu/noise_schedule.h"
#include "shm/ring.h"
#if HSRING_HAVE_CUDA
#include "gpu/device.h"
#endif

namespace hsring {

namespace {

void check_shm_space(const RunOptions& options, const RingLayout& layout) {
  struct statvfs fs {};
  if (::statvfs("/dev/shm", &fs) != 0) return;  // Ring::create reports what it finds
  const uint64_t free_bytes = uint64_t(fs.f_bavail) * fs.f_frsize;
  if (free_bytes >= layout.total_size) return;
  throw std::runtime_error("ring '" + options.ring + "' needs " +
                           gpu::human_bytes(layout.total_size) + " but /dev/shm has " +
                           gpu::human_bytes(free_bytes) +
                           " free: remove stale rings (`hsring ring remove NAME`), use fewer "
                           "--slots or --max-tokens, or enlarge /dev/shm");
}

void check_cuda_build() {
#if !HSRING_HAVE_CUDA
  throw std::invalid_argument(
      "GPU workers (--targets/--drafters with GPU ids) need a CUDA build of hsring; this "
      "build runs CPU workers only: use cpu:N");
#endif
}

void check_gpus(const WorkerSpec& targets, const WorkerSpec& drafters) {
#if HSRING_HAVE_CUDA
  const gpu::GpuInventory inventory = gpu::probe_gpus();
  // In the order given, each id once: the first bad one is reported.
  std::set<int> seen;
  for (const std::vector<int>* ids : {&targets.gpus, &drafters.gpus}) {
    for (int id : *ids) {
      if (!seen.insert(id).second) continue;
      if (std::string problem = gpu::gpu_problem(id, inventory); !problem.empty())
        throw std::invalid_argument(problem);
    }
  }
#else
  (void)targets;
  (void)drafters;
#endif
}

}  // namespace

void preflight_run(const RunOptions& options, const WorkerSpec& targets, const WorkerSpec& drafters,
                   const RingShape& shape) {
  const RingLayout layout = compute_layout(shape);
  const bool gpu_workers = !targets.cpu || !drafters.cpu;
  if (gpu_workers) check_cuda_build();
  check_shm_space(options, layout);
  if (!gpu_workers) return;

  // Every GPU worker pins every slot's payload (gpu/host_registration.h).
  const uint64_t pinned = layout.slot.stride * shape.slot_count;
  if (std::string problem = gpu::memlock_problem(pinned, "ring '" + options.ring + "'");
      !problem.empty())
    throw std::runtime_error(problem);
  check_gpus(targets, drafters);

  // A GPU target keeps up to depth + 1 slots WRITING (one per capture buffer); drafters
  // wait for hs_min_ready READY slots on top of those, or the run could stall.
  const uint64_t per_target = targets.cpu ? 1 : uint64_t(options.target_postprocess_depth) + 1;
  const uint64_t needed = uint64_t(shape.hs_min_ready) + shape.num_targets * per_target;
  if (needed > shape.slot_count)
    throw std::invalid_argument(
        "--hs-min-ready " + std::to_string(shape.hs_min_ready) + " with " +
        std::to_string(shape.num_targets) + " target(s) that each keep up to " +
        std::to_string(per_target) + " slot(s) in flight (--target-postprocess-depth " +
        std::to_string(options.target_postprocess_depth) + " + 1) needs " + std::to_string(needed) +
        " slots, but the ring has " + std::to_string(shape.slot_count) +
        ": raise --slots or lower --hs-min-ready or --target-postprocess-depth");

  if (!drafters.cpu) (void)gpu::parse_noise_schedule(options.noise_schedule, options.noise_std);
}

}  // namespace hsring
