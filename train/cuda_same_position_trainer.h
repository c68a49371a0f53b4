// The drafter's training step on one GPU: the CPU reference's model
// (train/same_position_model.h) and AdamW (train/optimizer.h) with fp32 master weights,
// gradients and moments on the device, its decoder layer the CUDA trainers' one
// (train/cuda_drafter_layer.h: RoPE alone, fp32 activations, around the sliding-window
// attention), and the linear layers' products in bf16 on the tensor cores
// (train/cuda_gemm.h; kFp32 for the tests that compare with the CPU to ~1e-5). Everything
// of a step is enqueued on the trainer's stream; a step synchronises twice, for the loss
// (to return it) and for the gradient norm (AdamW skips a non-finite gradient, a host
// decision).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "train/cuda_drafter_trainer.h"
#include "train/cuda_gemm.h"
#include "train/same_position_trainer.h"

namespace hsring::train {

class CudaSamePositionTrainer final : public CudaDrafterTrainer {
 public:
  // On the current device. Throws Error(kModelBadConfig) for an invalid model or optimizer
  // config or a head_dim the attention kernels do not take (a multiple of 32 up to 256),
  // Error(kModel) for an lm_head_init of the wrong size, Error(kCuda) when the
  // device memory does not suffice. options.threads is not used.
  explicit CudaSamePositionTrainer(const SamePositionTrainerOptions& options,
                                   GemmPrecision precision = GemmPrecision::kBf16);
  ~CudaSamePositionTrainer() override;

  const SamePositionConfig& config() const { return config_; }
  std::string describe() const override { return train::describe(config_); }
  const ParamLayout& layout() const override { return layout_; }

  // From host fp32 features (uploaded).
  LossStats compute_gradients(const DrafterBatch& batch) override;
  LossStats compute_gradients_bf16(const uint16_t* features, const DrafterBatch& batch) override;
  // Loss and agreement only.
  LossStats evaluate(const DrafterBatch& batch);

  cudaStream_t stream() const override;

 private:
  FlatState& flat_state() const override;
  struct Buffers;
  enum class Features { kHostFp32, kDeviceBf16 };
  LossStats run(const DrafterBatch& batch, Features source, const void* features, bool backward);
  void upload_batch(const DrafterBatch& batch, Features source, const void* features);
  void run_forward(uint32_t rows);
  LossStats run_head(const DrafterBatch& batch, bool backward);
  void run_backward(uint32_t rows);

  SamePositionConfig config_;
  AdamWOptions optimizer_;
  ParamLayout layout_;
  std::unique_ptr<Buffers> b_;
};

}  // namespace hsring::train
