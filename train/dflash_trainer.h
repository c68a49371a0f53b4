// One drafter training process's DFlash step on the CPU, in fp32: the block-diffusion
// drafter (train/dflash_model.h), its anchors drawn per batch, and AdamW. It trains on the
// same packed batches as every drafter (DrafterBatch: the target's captured layers, tokens,
// positions, documents, and the target's greedy next token per row), so it drops into the
// training loop beside the same-position trainer (train/same_position_trainer.h; both are a
// DrafterTrainer, train/drafter_trainer.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "train/dflash_config.h"
#include "train/dflash_model.h"
#include "train/drafter_trainer.h"
#include "train/optimizer.h"

namespace hsring::train {

// What a block position learns to predict.
enum class DflashLabels {
  kData,    // the data's own next token (the default: what the published recipe trains on)
  kTarget,  // the target's greedy next token the slot carries (self-distillation)
};

// "data" / "target"; parse_dflash_labels throws Error(kUsage) naming the choices.
const char* to_string(DflashLabels labels);
DflashLabels parse_dflash_labels(const std::string& text);

struct DflashTrainerOptions {
  DflashConfig model;
  AdamWOptions optimizer;
  uint64_t seed = 0;     // initialisation, and (with the step) each batch's anchors
  uint32_t threads = 0;  // 0: every hardware thread; results never depend on it
  size_t anchors = 0;    // blocks per batch; 0: default_anchor_count(batch tokens)
  DflashLabels labels = DflashLabels::kData;
  // The target's frozen input embedding and LM head, [V, D] each (lm_head empty: tied).
  std::vector<float> embed, lm_head;
};

// The pieces of a DFlash step every device's trainer shares, so that the CPU and a GPU
// score the same blocks of the same batch at the same step.
// The labels the blocks are scored against: the target's (as given) or the data's next
// token in each document (a document's last row has none: kIgnoreLabel).
void build_dflash_labels(const DrafterBatch& batch, DflashLabels labels, std::vector<int32_t>& out);
// The anchors of the step that follows `optimizer_step` updates: `anchors` of them (0:
// default_anchor_count), a pure function of (seed, optimizer_step) and the batch, so a
// batch produced again after a crash gets the anchors it would have had at that step.
std::vector<int32_t> dflash_step_anchors(const DrafterBatch& batch, std::span<const int32_t> labels,
                                         const DflashConfig& config, size_t anchors, uint64_t seed,
                                         uint64_t optimizer_step);
// A step's LossStats from its DflashStats over a batch of `tokens` rows.
LossStats dflash_loss_stats(const DflashStats& stats, size_t tokens);

// Thread safety: none; a trainer is driven by one thread (it uses others inside a step).
class DflashTrainer final : public DrafterTrainer {
 public:
  // Throws Error(kModelBadConfig) for an invalid model or optimizer config,
  // Error(kModel) for target weights of the wrong size.
  explicit DflashTrainer(DflashTrainerOptions options);
  // The model reads the target weights that options_ owns: neither copied nor moved.
  DflashTrainer(const DflashTrainer&) = delete;
  DflashTrainer& operator=(const DflashTrainer&) = delete;

  const DflashConfig& config() const { return model_.config(); }
  const DflashConfig* dflash_config() const override { return &model_.config(); }
  std::string describe() const override;
  const ParamLayout& layout() const override { return model_.layout(); }
  // Samples the batch's anchors, builds its labels, then forward and backward. `counted`
  // in the result is the positions scored (for a group's weighting); the loss is the
  // decay-weighted mean over them; acceptance_length is tau before the update.
  LossStats compute_gradients(const DrafterBatch& batch) override;
  void scale_gradients(float factor) override;
  UpdateStats apply_gradients() override;
  // Labels as a step builds them; the anchors of step 0 under a seed of its own, so every
  // evaluation of a batch scores the same blocks whatever the step.
  std::optional<LossStats> evaluate_held_out(const DrafterBatch& batch) override;
  bool evaluates_held_out() const override { return true; }
  uint64_t optimizer_step() const override { return optimizer_.step(); }
  std::span<float> host_gradients() override { return model_.grads(); }
  void host_gradients_changed() override {}
  TrainerState state() const override;
  void load_state(const TrainerState& state) override;

  // The last batch's statistics in full (per-position acceptance).
  const DflashStats& last_stats() const { return last_; }
  // The last batch's labels (one per row, kIgnoreLabel where nothing is predicted) and the
  // anchors sampled among them.
  std::span<const int32_t> last_labels() const { return labels_; }
  std::span<const int32_t> last_anchors() const { return anchors_; }
  DflashModel& model() { return model_; }

 private:
  DflashTrainerOptions options_;
  DflashModel model_;
  AdamW optimizer_;
  std::vector<int32_t> labels_, anchors_;
  std::vector<int32_t> eval_labels_, eval_anchors_;  // evaluate_held_out()'s, not the step's
  DflashStats last_;
};

}  // namespace hsring::train
