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
// are visible: every GPU, targets and drafters in the ratio 5:3 (at least one of each;
// 8 GPUs: targets 0-4, drafters 5-7; 2: one each; 1: both on GPU 0). No GPU: nullopt, the
// CPU defaults stay.
struct WorkerSplit {
  std::string targets, drafters;  // --targets / --drafters values
};
std::optional<WorkerSplit> default_gpu_split(int gpus);

}  // namespace hsring
