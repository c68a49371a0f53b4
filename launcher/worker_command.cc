#include "launcher/worker_command.h"

#include <algorithm>

#include "launcher/training_plan.h"
#include "worker/run_flags.h"
#include "worker/worker_main.h"

namespace hsring {

RunOptions resolve_worker_options(const RunOptions& options, Role role, bool gpu) {
  RunOptions resolved = options;
  if (role != Role::kDrafter || !runs_model(options)) return resolved;
  const TrainingPlan plan = training_plan(options);
  resolved.checkpoint_dir = plan.checkpoint_dir;
  resolved.rendezvous_dir = plan.rendezvous_dir;
  resolved.objective = drafter_objective(options, gpu);  // auto: DFlash, on CPUs and GPUs
  resolved.drafter_export = resolved.objective == "dflash" ? plan.export_dir : plan.export_path;
  // A run shorter than the warmup warms up over its whole length.
  if (options.total_steps != 0)
    resolved.warmup_steps = std::min(options.warmup_steps, options.total_steps);
  // main resolves the held-out data only when --eval-every asks for curves.
  if (options.eval_every == 0 || options.eval_data.empty()) {
    resolved.eval_every = 0;
    resolved.eval_data.clear();
    resolved.eval_data_held_out = false;
  }
  return resolved;
}

std::vector<std::string> worker_argv(const RunOptions& options, Role role, uint32_t index, int gpu,
                                     const std::string& bin_dir) {
  // GPU workers are their own programs: the CPU ones load no CUDA library (target_proc/
  // CMakeLists.txt says why).
  std::string program = bin_dir + (role == Role::kTarget ? "/hsring-target" : "/hsring-drafter");
  if (gpu >= 0) program += "-gpu";
  std::vector<std::string> argv = worker_place_argv(index, gpu);
  argv.insert(argv.begin(), program);
  const std::vector<std::string> run =
      run_flag_argv(resolve_worker_options(options, role, gpu >= 0), role, gpu >= 0);
  argv.insert(argv.end(), run.begin(), run.end());
  return argv;
}

}  // namespace hsring
