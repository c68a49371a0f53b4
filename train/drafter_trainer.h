// What a training drafter process needs of a trainer, whichever device it runs on: the CPU
// one (train/same_position_trainer.h, fp32) or the CUDA one (train/cuda_same_position_trainer.h,
// bf16 compute on fp32 master weights). The step is split in two so that processes training one
// drafter together can average their gradients in between:
//
//   LossStats local = trainer.compute_gradients(batch);        // this process's batch
//   trainer.scale_gradients(float(local.counted) / counted_over_all_processes);
//   ... sum host_gradients() across processes, host_gradients_changed() ...
//   UpdateStats update = trainer.apply_gradients();             // identical everywhere
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "train/dflash_config.h"
#include "train/drafter_batch.h"
#include "train/loss_stats.h"
#include "train/optimizer.h"
#include "train/param_layout.h"

namespace hsring::train {

struct StepStats {
  double loss = 0;               // mean cross-entropy over counted positions, before the update
  double agreement = 0;          // top-1 agreement with the target's labels, before the update
  double acceptance_length = 0;  // DFlash: teacher-forced tau on the batch, before the update
  uint64_t tokens = 0;           // positions in the batch
  uint64_t counted = 0;          // positions with a valid label
  double grad_norm = 0;          // before clipping
  double lr = 0;
  uint64_t step = 0;     // updates applied so far
  bool skipped = false;  // non-finite gradient: the update was not applied
  double step_ms = 0;    // forward + backward + update, wall clock
  double tokens_per_s = 0;
  std::vector<uint64_t> accepted_at;  // LossStats'
};

// Everything a checkpoint holds of a trainer, as host buffers of layout().total floats.
struct TrainerState {
  std::vector<float> params, first_moment, second_moment;
  uint64_t step = 0;  // updates applied
};

// Throws Error(kModel) unless each of the state's buffers holds `total` floats.
void check_state_sizes(const TrainerState& state, size_t total);

class AdamW;
// A CPU trainer's state: its parameters and its optimizer's moments and step.
TrainerState capture_state(std::span<const float> params, const AdamW& optimizer);
// The reverse; throws like check_state_sizes when a buffer is not params.size() floats.
void restore_state(const TrainerState& state, std::span<float> params, AdamW& optimizer);

// Thread safety: none; a trainer is driven by one thread.
class DrafterTrainer {
 public:
  virtual ~DrafterTrainer() = default;

  // The drafter's shape in one line, for logs and checkpoint metadata.
  virtual std::string describe() const = 0;
  virtual const ParamLayout& layout() const = 0;
  // The DFlash drafter's shape when this trainer trains one (its export needs it), else null.
  virtual const DflashConfig* dflash_config() const { return nullptr; }

  // Zeroes the gradients, then forward and backward over `batch`: the gradients hold the
  // gradient of this batch's mean loss. Throws Error(kModel) for a bad batch.
  virtual LossStats compute_gradients(const DrafterBatch& batch) = 0;
  virtual void scale_gradients(float factor) = 0;
  // Clips and applies the gradients with AdamW at the schedule's rate.
  virtual UpdateStats apply_gradients() = 0;
  // The loss and statistics of `batch` at the current weights, with no gradient and no
  // update (a held-out evaluation): the same blocks every call for the same batch. Nothing
  // (the default) when this trainer cannot (the CPU trainers can). Leaves the
  // last step's statistics alone.
  virtual std::optional<LossStats> evaluate_held_out(const DrafterBatch& batch) {
    (void)batch;
    return std::nullopt;
  }
  // Whether evaluate_held_out gives anything: asked before held-out batches are built.
  virtual bool evaluates_held_out() const { return false; }
  // Updates applied so far.
  virtual uint64_t optimizer_step() const = 0;

  // The gradient as host floats, to be reduced across processes in place; then
  // host_gradients_changed() hands the result back (a device trainer uploads it).
  virtual std::span<float> host_gradients() = 0;
  virtual void host_gradients_changed() = 0;

  virtual TrainerState state() const = 0;
  // Throws Error(kModel) when a buffer is not layout().total floats.
  virtual void load_state(const TrainerState& state) = 0;

  // compute_gradients then apply_gradients, timed.
  StepStats step(const DrafterBatch& batch);
  // The same around an already computed `loss` (a device batch, a group's reduction).
  static StepStats step_stats(const LossStats& loss, const UpdateStats& update, double seconds);
};

}  // namespace hsring::train
