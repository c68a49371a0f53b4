// What a drafter checkpoint holds and how a trainer is saved into one and restored from
// one (docs/checkpoint-format.md has the file format): every parameter under its HF name,
// AdamW's moments under "optimizer.m.<name>" / "optimizer.v.<name>", the step, and
// metadata naming the drafter's shape (a checkpoint of another shape is refused) and
// where each target was in its data shard.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_format.h"
#include "train/drafter_trainer.h"

namespace hsring {

struct TrainingPosition {
  // The data batch a resumed run continues from: every earlier one was consumed (batches
  // in flight at the checkpoint are produced again; see TrainingLoop::position() for the
  // one batch per group member that may be consumed but not yet stepped on).
  uint64_t next_data_batch = 0;
  uint64_t batches_trained = 0;  // by the whole run, across resumes
};

// The metadata key of TrainingPosition::next_data_batch (the launcher reads it to resume).
inline constexpr char kNextDataBatchKey[] = "data.next_batch";

checkpoint::Checkpoint save_training(const train::DrafterTrainer& trainer,
                                     const TrainingPosition& position);

// Restores parameters, moments and step into `trainer` and returns the data position.
// Throws Error(kCheckpoint) naming the problem when the
// checkpoint is of another drafter shape or lacks a tensor.
TrainingPosition restore_training(const checkpoint::Checkpoint& saved,
                                  train::DrafterTrainer& trainer);

// The parameters alone, under their HF names: what a safetensors export holds.
std::vector<checkpoint::Tensor> drafter_weights(const train::DrafterTrainer& trainer);

}  // namespace hsring
