// A GPU target's model forward: tokens from the TokenSource, the CUDA target model
// (model/cuda_target_model.h) run into the pipeline's capture buffer, greedy labels into a
// device array per capture buffer. The copier then copies the labels with the layers and
// writes the batch's host metadata (tokens, positions, document offsets) into the slot.
//
// Thread safety: enqueue() belongs to the target thread; write_metadata(b) to the copier
// and mask_labels(b) to the publisher, for a buffer b whose forward was enqueued and that
// the target thread does not reuse until the pipeline hands b back (after its copy
// completed and the slot was published).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "gpu/cuda_handles.h"
#include "model/cuda_target_model.h"
#include "target_proc/hidden_state_source.h"
#include "target_proc/token_source.h"

namespace hsring {

class Ring;

class GpuModelSource final : public BatchPlanner {
 public:
  // Reserves the model's scratch for a full slot and a labels array per capture buffer.
  // REQUIRES: model's GPU is the current device. Throws Error (data, model, cuda).
  GpuModelSource(std::unique_ptr<CudaTargetModel> model, const Ring& ring, uint32_t target,
                 const TokenSourceOptions& options, uint32_t capture_buffers);

  BatchPlan plan(uint64_t batch_id) override { return tokens_.plan(batch_id); }

  // Reads the batch's tokens and enqueues its forward on `stream`: the captured layers go
  // into `capture` (the ring's layout: K regions of `layer_bytes` each, or one [T, K*H]
  // region), the labels into buffer `buffer`'s device array.
  void enqueue(const BatchPlan& plan, uint32_t buffer, std::byte* capture, uint64_t layer_bytes,
               cudaStream_t stream);
  // Device labels of `buffer`'s forward ([T] int32), for the copier's D2H.
  const int32_t* labels(uint32_t buffer) const { return labels_[buffer].as<int32_t>(); }
  // Writes tokens, positions and document offsets of `buffer`'s batch into slot `slot`.
  void write_metadata(uint32_t buffer, const Ring& ring, uint32_t slot) const;
  // Applies the loss mask of `buffer`'s batch to slot `slot`'s labels row on the host
  // (data::mask_target_labels). REQUIRES: the labels' D2H copy into the slot completed.
  void mask_labels(uint32_t buffer, const Ring& ring, uint32_t slot) const;
  // True when mask_labels would change `buffer`'s labels (an early publish must then wait
  // for the copy, since the mask goes on top of the copied labels on the host).
  bool masks_labels(uint32_t buffer) const;

 private:
  std::unique_ptr<CudaTargetModel> model_;
  TokenSource tokens_;
  DType dtype_;
  uint32_t layers_, hidden_;
  bool split_;
  ForwardRequest request_;
  std::vector<gpu::DeviceBuffer> labels_;  // per capture buffer: [max_tokens] int32
  std::vector<data::TokenBatch> batches_;  // per capture buffer: the host metadata
};

}  // namespace hsring
