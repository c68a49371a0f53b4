#include "launcher/worker_command.h"

#include "launcher/training_plan.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "worker/profile_interval.h"

namespace hsring {

namespace {

// A double that parses back to the same value (std::to_string keeps 6 decimals only).
std::string exact(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

}  // namespace

std::vector<std::string> worker_argv(const RunOptions& options, Role role, uint32_t index, int gpu,
                                     const std::string& bin_dir) {
  const bool target = role == Role::kTarget;
  // GPU workers are their own programs: the CPU ones load no CUDA library (target_proc/
  // CMakeLists.txt says why).
  std::string program = bin_dir + (target ? "/hsring-target" : "/hsring-drafter");
  if (gpu >= 0) program += "-gpu";
  std::vector<std::string> argv = {program, "--ring", options.ring, "--index",
                                   std::to_string(index)};
  if (gpu >= 0) argv.insert(argv.end(), {"--gpu", std::to_string(gpu)});
  if (target && runs_model(options)) {
    argv.insert(argv.end(),
                {"--model", options.model, "--model-seed", std::to_string(options.model_seed),
                 "--data-seed", std::to_string(options.data_seed), "--read-ahead",
                 std::to_string(options.read_ahead)});
    if (!options.data.empty()) argv.insert(argv.end(), {"--data", options.data});
    if (options.nnodes > 1)
      argv.insert(argv.end(), {"--nnodes", std::to_string(options.nnodes), "--node-rank",
                               std::to_string(options.node_rank)});
  }
  if (!target && runs_model(options)) {
    const TrainingPlan plan = training_plan(options);
    // A run shorter than the warmup warms up over its whole length.
    const uint64_t warmup = options.total_steps
                                ? std::min(options.warmup_steps, options.total_steps)
                                : options.warmup_steps;
    argv.insert(argv.end(), {"--model",
                             options.model,
                             "--lr",
                             exact(options.lr),
                             "--min-lr",
                             exact(options.min_lr),
                             "--warmup-steps",
                             std::to_string(warmup),
                             "--adam-beta2",
                             exact(options.adam_beta2),
                             "--weight-decay",
                             exact(options.weight_decay),
                             "--max-grad-norm",
                             exact(options.max_grad_norm),
                             "--total-steps",
                             std::to_string(options.total_steps),
                             "--window",
                             std::to_string(options.window),
                             "--train-seed",
                             std::to_string(options.train_seed),
                             "--checkpoint-dir",
                             plan.checkpoint_dir,
                             "--run-dir",
                             options.run_dir,
                             "--checkpoint-every",
                             std::to_string(options.checkpoint_every),
                             "--keep-checkpoints",
                             std::to_string(options.keep_checkpoints),
                             "--model-seed",
                             std::to_string(options.model_seed)});
    // auto: the DFlash objective, on the CPU and on GPUs.
    const std::string objective = drafter_objective(options, gpu >= 0);
    argv.insert(argv.end(), {"--objective", objective, "--export",
                             objective == "dflash" ? plan.export_dir : plan.export_path});
    if (objective == "dflash")
      argv.insert(argv.end(),
                  {"--draft-layers", std::to_string(options.draft_layers), "--block-size",
                   std::to_string(options.block_size), "--anchors", std::to_string(options.anchors),
                   "--loss-gamma", exact(options.loss_gamma), "--mask-token-id",
                   std::to_string(options.mask_token_id), "--labels", options.labels});
    if (options.nnodes > 1)
      argv.insert(argv.end(),
                  {"--nnodes", std::to_string(options.nnodes), "--node-rank",
                   std::to_string(options.node_rank), "--rendezvous-dir", plan.rendezvous_dir});
    if (options.eval_every > 0 && !options.eval_data.empty()) {
      argv.insert(argv.end(), {"--eval-every", std::to_string(options.eval_every), "--eval-data",
                               options.eval_data});
      if (options.eval_data_held_out) argv.push_back("--eval-data-held-out");
    }
  }
  if (target && options.target_rate > 0)
    argv.insert(argv.end(), {"--rate", std::to_string(options.target_rate)});
  if (!target && options.drafter_step_ms > 0)
    argv.insert(argv.end(), {"--step-ms", std::to_string(options.drafter_step_ms)});
  // The launcher resolved flag, config and HSRING_PROFILE_INTERVAL; a worker would read
  // the inherited variable when given no flag, so pass even 0 while the variable is set.
  if (options.profile_interval_s > 0 || std::getenv(kProfileIntervalEnv) != nullptr)
    argv.insert(argv.end(), {"--profile-interval", exact(options.profile_interval_s)});
  if (gpu >= 0 && target) {
    argv.insert(argv.end(),
                {"--postprocess-depth", std::to_string(options.target_postprocess_depth),
                 "--publish", options.target_publish});
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
