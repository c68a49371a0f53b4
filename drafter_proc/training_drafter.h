// The drafter's loop in training mode (a ring of model batches, on the CPU or a GPU:
// training_backend.h): claim a READY
// slot once enough are ready, check the batch's invariants, copy it out and release the
// slot, then one optimizer step of the drafter (train/same_position_trainer.h) on it. Every
// `checkpoint_every` steps, and at a clean stop, the trainer is checkpointed; a drafter
// that starts with checkpoints in its directory resumes from the newest valid one, so a
// drafter SIGKILLed mid-run continues its loss curve from there.
//
// With several drafters in the ring they train one drafter together: each step every
// member computes its batch's gradient and they all-reduce the token-weighted mean
// through drafter_proc/grad_exchange.h (GPU drafters: NCCL), so the replicas stay bit-identical.
// With --nnodes the group spans machines: every node's drafters, ranked node by node,
// all-reduce through NCCL and meet through a shared folder (group_files.h); their
// checkpoint folder is shared too. Drafter 0 of node 0 alone writes checkpoints, the
// training curves and the export; each node's drafter 0 writes its ring's TrainingProgress. A
// member whose group breaks (a peer died or restarted) exits with kExitGroupRestart; the launcher
// restarts it and every member reloads the newest checkpoint.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "drafter_proc/training_backend.h"
#include "shm/worker_session.h"
#include "train/optimizer.h"

namespace hsring {

// What the drafter learns (docs/drafter-training.md).
enum class DrafterObjective {
  kDflash,        // DFlash blocks: predict the B - 1 tokens after each anchor (it drafts)
  kSamePosition,  // the target's own next token at the position it reads (does not draft)
};
const char* to_string(DrafterObjective objective);
// "dflash" / "same-position"; throws Error(kUsage) naming the choices.
DrafterObjective parse_drafter_objective(const std::string& text);

// The DFlash drafter's choices (train/dflash_config.h, train/dflash_trainer.h); 0: the
// default derived from the target. A drafter process fills these options from its flags
// (training_options_of, drafter_flags.h): its defaults are the run's (worker/run_options.h).
struct DflashChoices {
  uint32_t draft_layers = 0;
  uint32_t block_size = 16;
  uint32_t anchors = 0;        // per batch; 0: default_anchor_count
  double loss_gamma = 0;       // 0: 7 for B 16, scaled with B
  int64_t mask_token_id = -1;  // -1: chosen from the target's tokenizer (choose_mask_token)
  std::string labels = "data";
};

struct TrainingDrafterOptions {
  std::string target_model;  // the target's model spec: the drafter's shape derives from it
  uint64_t model_seed = 0;   // a preset target's weights (its embedding and LM head)
  DrafterObjective objective = DrafterObjective::kDflash;
  DflashChoices dflash;
  uint32_t window = 256;  // same-position objective: sliding attention window
  uint64_t seed = 0;      // initialisation
  uint32_t threads = 0;   // 0: every core
  train::AdamWOptions optimizer;
  std::string checkpoint_dir;     // "" : no checkpoints, no resume
  uint64_t checkpoint_every = 0;  // steps; 0: only at a clean stop
  uint32_t keep_checkpoints = 3;
  std::string export_path;  // safetensors of the weights at a clean stop; "" : none
  // The run folder: drafter 0 of node 0 writes the training curves there
  // (curves/training_curves.h); "" : none.
  std::string run_dir;
  // Held-out curves: every `eval_every` steps (0: never) drafter 0 of node 0 evaluates the
  // held-out batches of `eval_data` (its held-out documents only with eval_data_held_out;
  // drafter_proc/held_out_set.h) and adds eval_loss, eval_acceptance_length and
  // eval_agreement to that step's curve record.
  uint64_t eval_every = 0;
  std::string eval_data;
  bool eval_data_held_out = false;
  uint32_t nnodes = 1;                       // machines whose drafters form one group
  uint32_t node_rank = 0;                    // this machine's
  std::string rendezvous_dir;                // nnodes > 1: the folder every machine sees
  TrainingBackendFactory make_backend;       // same-position; empty: the CPU
  DflashBackendFactory make_dflash_backend;  // DFlash; empty: the CPU
};

// Runs the training loop until the ring drains or a stop is requested. Setup errors (a
// drafter shape that does not fit the ring, a damaged checkpoint directory) are logged
// and give kExitUsage / kExitRingError. Returns the process exit code.
int run_training_drafter(WorkerSession& session, const TrainingDrafterOptions& options);

}  // namespace hsring
