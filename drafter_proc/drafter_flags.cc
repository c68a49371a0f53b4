#include "drafter_proc/drafter_flags.h"

#include "common/error.h"

namespace hsring {

TrainingDrafterOptions training_options_of(const RunOptions& run) {
  TrainingDrafterOptions o;
  o.target_model = run.model;
  o.model_seed = run.model_seed;
  o.objective = parse_drafter_objective(run.objective != "auto" ? run.objective : "dflash");
  o.dflash = {.draft_layers = run.draft_layers,
              .block_size = run.block_size,
              .anchors = run.anchors,
              .loss_gamma = run.loss_gamma,
              .mask_token_id = run.mask_token_id,
              .labels = run.labels};
  o.window = run.window;
  o.seed = run.train_seed;
  train::LrSchedule& schedule = o.optimizer.schedule;
  schedule.peak_lr = run.lr;
  schedule.min_lr = run.min_lr;
  schedule.warmup_steps = run.warmup_steps;
  schedule.total_steps = run.total_steps;
  if (schedule.warmup_steps > schedule.total_steps && schedule.total_steps != 0)
    throw Error(Errc::kUsage, "--warmup-steps exceeds --total-steps");
  o.optimizer.beta2 = run.adam_beta2;
  o.optimizer.weight_decay = run.weight_decay;
  o.optimizer.max_grad_norm = run.max_grad_norm;
  o.checkpoint_dir = run.checkpoint_dir;
  o.checkpoint_every = run.checkpoint_every;
  o.keep_checkpoints = run.keep_checkpoints;
  o.export_path = run.drafter_export;
  o.run_dir = run.run_dir;
  o.eval_every = run.eval_every;
  o.eval_data = run.eval_data;
  o.eval_data_held_out = run.eval_data_held_out;
  o.nnodes = run.nnodes;
  o.node_rank = run.node_rank;
  o.rendezvous_dir = run.rendezvous_dir;
  return o;
}

}  // namespace hsring
