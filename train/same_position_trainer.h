// The same-position drafter's training step on the CPU, in fp32: the model and its AdamW
// optimizer (train/drafter_trainer.h has the step's protocol).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "train/drafter_trainer.h"
#include "train/optimizer.h"
#include "train/same_position_config.h"
#include "train/same_position_model.h"

namespace hsring::train {

struct SamePositionTrainerOptions {
  SamePositionConfig model;
  AdamWOptions optimizer;
  uint64_t seed = 0;     // parameter initialisation
  uint32_t threads = 0;  // 0: every hardware thread; results never depend on it
  // [V, D] initial lm_head.weight (the target's head when D == H); empty: random.
  std::vector<float> lm_head_init;
};

// Thread safety: none; a trainer is driven by one thread (it uses others inside a step).
class SamePositionTrainer final : public DrafterTrainer {
 public:
  // Throws Error(kModelBadConfig) for an invalid model or optimizer config,
  // Error(kModel) for an lm_head_init of the wrong size.
  explicit SamePositionTrainer(SamePositionTrainerOptions options);

  const SamePositionConfig& config() const { return model_.config(); }
  std::string describe() const override { return train::describe(model_.config()); }
  const ParamLayout& layout() const override { return model_.layout(); }
  LossStats compute_gradients(const DrafterBatch& batch) override;
  // The flat gradient buffer (layout().total floats) to all-reduce in place.
  std::span<float> gradients() { return model_.grads(); }
  void scale_gradients(float factor) override;
  UpdateStats apply_gradients() override;
  uint64_t optimizer_step() const override { return optimizer_.step(); }
  std::span<float> host_gradients() override { return model_.grads(); }
  void host_gradients_changed() override {}
  TrainerState state() const override;
  void load_state(const TrainerState& state) override;

  // Loss and agreement without gradients or an update (held-out batches).
  LossStats evaluate(const DrafterBatch& batch) { return model_.forward(batch); }
  std::optional<LossStats> evaluate_held_out(const DrafterBatch& batch) override {
    return evaluate(batch);
  }
  bool evaluates_held_out() const override { return true; }

  SamePositionModel& model() { return model_; }
  const SamePositionModel& model() const { return model_; }
  AdamW& optimizer() { return optimizer_; }
  const AdamW& optimizer() const { return optimizer_; }

 private:
  SamePositionModel model_;
  AdamW optimizer_;
};

}  // namespace hsring::train
