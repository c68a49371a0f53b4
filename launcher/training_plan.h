// Where a model run's drafter training keeps its state and how long its schedule is: the
// run folder (checkpoints/ and drafter.safetensors), the step the cosine decay ends at,
// and, for --resume, the checkpoint it continues from and where each target was in its
// data. Decided once by the launcher, before any worker starts, so every drafter and
// every restart of one gets the same answer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "launcher/run_options.h"
#include "launcher/worker_spec.h"
#include "shm/ring_layout.h"

namespace hsring {

struct TrainingPlan {
  std::string checkpoint_dir;
  std::string export_path;       // the same-position drafter's safetensors
  std::string export_dir;        // the DFlash drafter's folder (docs/dflash-export.md)
  std::string rendezvous_dir;    // --nnodes > 1: where the drafter group meets; else ""
  uint64_t resume_step = 0;      // the resumed checkpoint's step (0: a fresh run)
  uint64_t total_steps = 0;      // prepare_training: resume_step + this run's steps; 0: no decay
  uint64_t next_data_batch = 0;  // --resume: the first data batch not trained on
};

// What drafters on a GPU (gpu) or on the CPU learn: options.objective, with "auto" the
// DFlash objective on both (same-position only when asked for by name).
std::string drafter_objective(const RunOptions& options, bool gpu);

// Fills options.run_dir when empty: hsring-runs/<ring>-<UTC time> for a launched run, the
// folder above --resume's for a resumed one, /var/lib/hsring/<ring> under systemd
// (`service`: every unit must find the same folder).
void resolve_run_dir(RunOptions& options, bool service = false);

// REQUIRES: options.run_dir is set (resolve_run_dir) or options.resume is. Throws
// Error(kUsage) for --resume with --checkpoint-dir.
TrainingPlan training_plan(const RunOptions& options);

// A run over several machines (--nnodes > 1) trains GPU drafters on a model, and names
// its run folder (or --resume) on storage every machine sees: each machine's default run
// folder would be its own. Throws Error(kUsage) saying what to give.
void check_multi_node(const RunOptions& options, const WorkerSpec& drafters);

// Checks, before a fresh run creates anything, that its checkpoint folder holds no
// checkpoint of an earlier run (it would be resumed by surprise; on node 0 only: across
// machines node 0's drafter may have written one before another node's launcher starts),
// and for --resume that
// the folder holds a valid one; reads the data position to continue from. Throws
// Error(kUsage) saying what to do.
TrainingPlan prepare_training(const RunOptions& options, const RingShape& shape);

}  // namespace hsring
