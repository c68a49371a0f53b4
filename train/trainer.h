// One drafter training process's step on the CPU: the model, its AdamW optimizer, and the
// timing of each step. The step is split in two so that processes training one drafter
// together can average their gradients (through shared memory) in between:
//
//   LossStats local = trainer.compute_gradients(batch);       // this process's batch
//   trainer.scale_gradients(float(local.counted) / counted_over_all_processes);
//   ... sum gradients() across processes ...                   // now the global token mean
//   UpdateStats update = trainer.apply_gradients();            // identical on every process
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "train/drafter_config.h"
#include "train/drafter_model.h"
#include "train/optimizer.h"

namespace hsring::train {

struct TrainerOptions {
  DrafterConfig model;
  AdamWOptions optimizer;
  uint64_t seed = 0;     // parameter initialisation
  uint32_t threads = 0;  // 0: every hardware thread; results never depend on it
  // [V, D] initial lm_head.weight (the target's head when D == H); empty: random.
  std::vector<float> lm_head_init;
};

struct StepStats {
  double loss = 0;       // mean cross-entropy over counted positions, before the update
  double agreement = 0;  // top-1 agreement with the target's labels, before the update
  uint64_t tokens = 0;   // positions in the batch
  uint64_t counted = 0;  // positions with a valid label
  double grad_norm = 0;  // before clipping
  double lr = 0;
  uint64_t step = 0;     // updates applied so far
  bool skipped = false;  // non-finite gradient: the update was not applied
  double step_ms = 0;    // forward + backward + update, wall clock
  double tokens_per_s = 0;
};

// Thread safety: none; a trainer is driven by one thread (it uses others inside a step).
class Trainer {
 public:
  // Throws ModelError(kBadConfig) for an invalid model or optimizer config,
  // ModelError(kBadTensor) for an lm_head_init of the wrong size.
  explicit Trainer(TrainerOptions options);

  // Zeroes the gradients, then forward and backward over `batch`: gradients() holds the
  // gradient of this batch's mean loss. Throws ModelError(kBadInput) for a bad batch.
  LossStats compute_gradients(const DrafterBatch& batch);
  // The flat gradient buffer (layout().total floats) to all-reduce in place.
  std::span<float> gradients() { return model_.grads(); }
  void scale_gradients(float factor);
  // Clips and applies gradients() with AdamW at the schedule's rate.
  UpdateStats apply_gradients();

  // compute_gradients then apply_gradients, timed.
  StepStats step(const DrafterBatch& batch);
  // Loss and agreement without gradients or an update (held-out batches).
  LossStats evaluate(const DrafterBatch& batch) { return model_.forward(batch); }

  DrafterModel& model() { return model_; }
  const DrafterModel& model() const { return model_; }
  AdamW& optimizer() { return optimizer_; }
  const AdamW& optimizer() const { return optimizer_; }
  const ParamLayout& layout() const { return model_.layout(); }

 private:
  DrafterModel model_;
  AdamW optimizer_;
};

}  // namespace hsring::train
