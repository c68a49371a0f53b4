// Parsing of --targets / --drafters: "cpu:N" for N CPU-mode workers, or a list of GPU ids
// ("0,1,2") for one worker per listed GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hsring {

struct WorkerSpec {
  bool cpu = true;
  uint32_t count = 0;
  std::vector<int> gpus;  // one entry per worker when !cpu; ids may repeat
};

// Throws Error(kUsage) whose message names `flag`, the bad text, and the forms
// that are accepted.
WorkerSpec parse_worker_spec(const std::string& text, const std::string& flag);

// What `hsring run` uses when neither --targets nor --drafters is given and `gpus` GPUs
// are visible: every GPU, the first `target_gpus` (1 .. gpus - 1, launcher/gpu_split.h
// chooses) targets and the rest drafters; 1 GPU: both on GPU 0. No GPU: nullopt, the CPU
// defaults stay.
struct WorkerSplit {
  std::string targets, drafters;  // --targets / --drafters values
};
std::optional<WorkerSplit> gpu_split(int gpus, int target_gpus);

}  // namespace hsring
