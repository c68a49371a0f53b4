// What a drafter trainer on a GPU offers beyond DrafterTrainer, whichever objective it
// trains (train/cuda_same_position_trainer.h: same-position; train/cuda_dflash_trainer.h: DFlash):
// a step from features already on the device, and its stream and flat gradient for an NCCL
// all-reduce (drafter_proc/nccl_group.h). The optimizer's side is written here once, for
// both: AdamW over the trainer's flat state (train/cuda_flat_state.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "train/drafter_trainer.h"

namespace hsring::train {

class FlatState;

// The LM head's logits alive at once in a GPU trainer: at most this many floats (1 GiB),
// whatever the vocabulary; the head runs over its rows in chunks of this size.
inline constexpr size_t kMaxLogitValues = size_t(1) << 28;

class CudaDrafterTrainer : public DrafterTrainer {
 public:
  // From the batch's features already on this device as bf16 [T, K*H] (the ring's dtype:
  // a slot's payload after its DMA); `batch` gives the token metadata (host), its features
  // are not read. REQUIRES: `features` stays valid until the call returns.
  virtual LossStats compute_gradients_bf16(const uint16_t* features, const DrafterBatch& batch) = 0;

  // Everything of a step is enqueued on this stream.
  virtual cudaStream_t stream() const = 0;
  // The flat gradient on the device (layout().total floats), for an NCCL all-reduce on
  // stream(); scale_gradients() and apply_gradients() run on the same stream after it.
  // Gradients the step kept in bf16 are widened into it first (enqueued on stream()), so
  // the caller may change them.
  float* device_gradients();

  void scale_gradients(float factor) override;
  UpdateStats apply_gradients() override;
  uint64_t optimizer_step() const override;
  std::span<float> host_gradients() override;
  void host_gradients_changed() override;
  TrainerState state() const override;
  void load_state(const TrainerState& state) override;

  // Host copies of the flat parameter and gradient buffers (tests).
  std::vector<float> params() const;
  std::vector<float> gradients() const;

 protected:
  // The trainer's master weights, gradients and AdamW moments on the device (downloads
  // through a const trainer widen bf16 gradients there: the device state is not the
  // trainer's logical state).
  virtual FlatState& flat_state() const = 0;
};

}  // namespace hsring::train
