// The DFlash drafter's training step on one GPU: the CPU DflashModel's forward, weighted
// loss and backward (train/dflash_model.h) and AdamW, each layer the CUDA trainers' one
// (train/cuda_drafter_layer.h: QK-norm, layer 0's mask rows and the last layer's scored
// rows, around the block attention), with fp32 master weights, gradients and moments on
// the device (train/cuda_flat_state.h; in bf16 mode the matrices' gradients are the bf16
// products' own, as autocast's are), the products in bf16 on the tensor cores
// (train/cuda_gemm.h; kFp32 for the tests that compare with the CPU) and its own block
// attention kernels (train/cuda_block_attention_bf16.h on the tensor cores in kBf16,
// train/cuda_block_attention.h in fp32 otherwise). Anchors and labels are chosen on the
// host by the CPU trainer's functions (train/dflash_trainer.h), so both score the same
// blocks. The target's embedding and LM head are kept frozen on the device in fp32 (the
// head also in bf16, for its products: train/cuda_gemm.h keep_bf16_copy). A step
// synchronises twice, for the loss and for the gradient norm.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "train/cuda_drafter_trainer.h"
#include "train/cuda_gemm.h"
#include "train/dflash_trainer.h"

namespace hsring::train {

// Thread safety: none; a trainer is driven by one thread.
class CudaDflashTrainer final : public CudaDrafterTrainer {
 public:
  // On the current device; options as DflashTrainer's (threads is not used; the target
  // weights are uploaded, options' copies may be freed after). Throws
  // Error(kModelBadConfig) for an invalid model or optimizer config or a head_dim the
  // kernel does not take (a multiple of 32 up to 256), Error(kModel) for target
  // weights of the wrong size, Error(kCuda) when device memory does not suffice. The head
  // runs over the scored rows in chunks of at most max_logit_values logits (at least a row).
  explicit CudaDflashTrainer(const DflashTrainerOptions& options,
                             GemmPrecision precision = GemmPrecision::kBf16,
                             size_t max_logit_values = kMaxLogitValues);
  ~CudaDflashTrainer() override;

  const DflashConfig& config() const { return config_; }
  const DflashConfig* dflash_config() const override { return &config_; }
  std::string describe() const override;
  const ParamLayout& layout() const override { return layout_; }

  // From host fp32 features (uploaded). Results as DflashTrainer::compute_gradients.
  LossStats compute_gradients(const DrafterBatch& batch) override;
  LossStats compute_gradients_bf16(const uint16_t* features, const DrafterBatch& batch) override;

  // CudaDrafterTrainer's, with the phase timing's marks around it.
  UpdateStats apply_gradients() override;

  // Drafting, for speculative decoding (eval/gpu_speculative_decode.h): the forward of the
  // blocks anchored at `anchors` (validated as training's) over `batch`'s documents, with
  // blocks of `block_size` rows (2 .. the config's: a decode's last blocks are shorter), and
  // no loss or gradient. The features are `device_features`, fp32 [T, K*H] on the device
  // (batch.features and batch.labels are not read). Returns each block's argmax at
  // positions 1 .. block_size - 1, [anchors.size() * (block_size - 1)], the first on ties,
  // and with `logits` those rows' fp32 logits too, [that many rows * V] on the host (for
  // speculative sampling, whose drafts are drawn from them). Needs the kFp32 precision (its
  // logits are fp32). Throws Error(kModel) for a bad batch, anchors or block size,
  // Error(kCuda).
  std::vector<int32_t> draft(const DrafterBatch& batch, std::span<const int32_t> anchors,
                             uint32_t block_size, const float* device_features,
                             std::vector<float>* logits = nullptr);

  // Per-phase device time (cudaEvents between the step's phases, on its one stream): off
  // by default. When on, phase_ms() gives the last compute_gradients* and the
  // apply_gradients after it, in milliseconds summed by phase name, in first-seen order.
  void set_phase_timing(bool on);
  std::vector<std::pair<std::string, double>> phase_ms() const;

  // The last batch's statistics in full (per-position acceptance), as DflashTrainer's.
  const DflashStats& last_stats() const { return last_; }
  cudaStream_t stream() const override;

 private:
  FlatState& flat_state() const override;
  struct Buffers;
  enum class Features { kHostFp32, kDeviceBf16, kDeviceFp32 };
  LossStats run(const DrafterBatch& batch, Features source, const void* features);
  // The context's inputs (positions, features, their RoPE table), then the rest of the step's.
  void upload_context(const DrafterBatch& batch, Features source, const void* features);
  void upload(const DrafterBatch& batch);
  void run_context_forward();  // fc + hidden_norm, enqueued before the host lays out the blocks
  void run_forward();
  void layer_forward(uint32_t layer);
  void run_head();  // logits, loss and d(final) of the scored rows (or their argmax), in chunks
  void run_backward();
  void layer_backward(uint32_t layer);
  DflashStats gather_stats();
  void mark(const char* phase);  // the time since the last mark goes to `phase`

  DflashTrainerOptions options_;  // without the target weights (they live on the device)
  DflashConfig config_;
  ParamLayout layout_;
  std::unique_ptr<Buffers> b_;
  std::vector<int32_t> labels_, anchors_, context_;
  DflashBlockRows rows_;
  DflashStats last_;
};

}  // namespace hsring::train
