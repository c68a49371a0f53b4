// What `hsring run` checks before it creates the ring and starts any worker, so a
// configuration that cannot work fails once with a clear message instead of as a crash
// loop: room in /dev/shm, memory for the ring and the workers, CPUs for the workers, and
// for GPU workers a CUDA build, GPUs that exist and can register host memory, a memlock
// limit that covers the ring, enough slots for what the GPU targets keep in flight, and a
// valid noise schedule. Every refusal is one line that says what to change.
//
// The checks take the machine's facts as a value, so tests can present a full /dev/shm,
// a low memlock limit or a missing GPU without such a machine.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/run_options.h"
#include "launcher/worker_spec.h"
#include "shm/ring_layout.h"

namespace hsring {

struct SplitRequest;  // launcher/gpu_split.h

// What the machine offers this process, as far as the checks need to know.
struct SystemFacts {
  bool cuda_build = false;                  // this build can run GPU workers
  std::optional<uint64_t> shm_free_bytes;   // free space in /dev/shm; nullopt: unknown
  uint64_t memlock_limit = UINT64_MAX;      // RLIMIT_MEMLOCK soft limit; UINT64_MAX: unlimited
  uint32_t cpus = 0;                        // CPUs this process may run on; 0: unknown
  std::optional<uint64_t> mem_available;    // bytes new memory may take; nullopt: unknown
  std::string mem_available_source;         // where mem_available comes from, for messages
  int gpu_count = 0;                        // GPUs CUDA shows this process
  std::string gpu_why_none;                 // when gpu_count is 0: what CUDA said
  std::map<int, std::string> gpu_problems;  // requested GPU -> why it cannot serve a worker
};

// Measures the facts for a run of `targets` and `drafters`. Asks CUDA about GPUs only
// when a worker runs on one (and the build has CUDA). Never throws.
SystemFacts measure_system_facts(const WorkerSpec& targets, const WorkerSpec& drafters);

// Checks a run request against `facts`. Returns warnings (a request that works, but
// worse than it could); throws Error(kUsage) for a bad request (a GPU that does
// not exist, too few slots, a bad noise schedule) and Error of class ring (/dev/shm) or
// system (memory, memlock, CPUs for GPU workers) for a machine that cannot serve it.
std::vector<std::string> check_run_request(const RunOptions& options, const WorkerSpec& targets,
                                           const WorkerSpec& drafters, const RingShape& shape,
                                           const SystemFacts& facts);

// Sets --targets / --drafters to the split `request` (options.split, parsed by the caller on
// every machine) asks for of the GPUs this process sees (none in a build without CUDA), and
// logs the choice; leaves the CPU defaults when there is none.
void apply_default_gpu_split(RunOptions& options, const SplitRequest& request);

// measure_system_facts, then check_run_request; logs the warnings ("warning: ...").
void preflight_run(const RunOptions& options, const WorkerSpec& targets, const WorkerSpec& drafters,
                   const RingShape& shape);

// Memory a worker process needs beside the ring, as the memory check counts it: an
// estimate with room to spare, not a measurement.
uint64_t worker_memory_estimate(const RunOptions& options, Role role, bool on_gpu);

// The bytes of the "<ring>-grads" segment the run's drafters average their gradients
// through (drafter_proc/grad_exchange.h): several CPU drafters training a model on one machine;
// 0 for a run without one (GPU drafters use NCCL). The /dev/shm and memory checks count it.
uint64_t grad_exchange_bytes(const RunOptions& options, const WorkerSpec& drafters,
                             const RingShape& shape);

// Readers of the memory facts, on the files' text (for tests).
// MemAvailable of /proc/meminfo in bytes; nullopt when absent.
std::optional<uint64_t> meminfo_available_bytes(const std::string& meminfo);
// A cgroup's memory limit and what it holds that it cannot reclaim (its usage less its
// inactive file cache), from memory.max (v2) or memory.limit_in_bytes (v1), the usage
// file and memory.stat; nullopt when there is no limit ("max", or v1's huge default).
struct CgroupMemory {
  uint64_t limit = 0;
  uint64_t in_use = 0;
};
std::optional<CgroupMemory> parse_cgroup_memory(const std::string& limit, const std::string& usage,
                                                const std::string& stat);

}  // namespace hsring
