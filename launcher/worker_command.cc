#include "launcher/worker_command.h"

namespace hsring {

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
  return argv;
}

}  // namespace hsring
