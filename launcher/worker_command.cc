#include "launcher/worker_command.h"

#include <cstdio>

namespace hsring {

namespace {

// A double that parses back to the same value (std::to_string keeps 6 decimals only).
std::string exact(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

}  // namespace

std::vector<std::string> worker_argv(const RunOptions& options, Role role, uint32_t index,
                                     int gpu, const std::string& bin_dir) {
  const bool target = role == Role::kTarget;
  std::vector<std::string> argv = {bin_dir + (target ? "/hsring-target" : "/hsring-drafter"),
                                   "--ring", options.ring, "--index", std::to_string(index)};
  if (gpu >= 0) argv.insert(argv.end(), {"--gpu", std::to_string(gpu)});
  if (target && options.target_rate > 0)
    argv.insert(argv.end(), {"--rate", std::to_string(options.target_rate)});
  if (!target && options.drafter_step_ms > 0)
    argv.insert(argv.end(), {"--step-ms", std::to_string(options.drafter_step_ms)});
  if (gpu >= 0 && target) {
    argv.insert(argv.end(), {"--postprocess-depth", std::to_string(options.target_postprocess_depth)});
    if (options.gemm_flops_per_batch > 0)
      argv.insert(argv.end(), {"--gemm-flops-per-batch", exact(options.gemm_flops_per_batch)});
  }
  if (gpu >= 0 && !target) {
    argv.insert(argv.end(), {"--noise-std", exact(options.noise_std), "--noise-schedule",
                             options.noise_schedule});
  }
  return argv;
}

}  // namespace hsring
