#include "target_proc/gpu_model_source.h"

#include <algorithm>

#include "shm/ring.h"

namespace hsring {

GpuModelSource::GpuModelSource(std::unique_ptr<CudaTargetModel> model, const Ring& ring,
                               uint32_t target, const TokenSourceOptions& options,
                               uint32_t capture_buffers)
    : model_(std::move(model)),
      tokens_(options, model_->config(), ring.shape().max_tokens, target, ring.shape().num_targets),
      dtype_(ring.shape().dtype),
      layers_(ring.shape().num_layers),
      hidden_(ring.shape().hidden_size),
      split_(ring.shape().split_layers != 0),
      batches_(capture_buffers) {
  const RingShape& s = ring.shape();
  request_.capture_layers.assign(s.layer_ids, s.layer_ids + s.num_layers);
  validate_request(request_, model_->config());
  model_->reserve(s.max_tokens);
  for (uint32_t b = 0; b < capture_buffers; ++b)
    labels_.push_back(gpu::DeviceBuffer::allocate(sizeof(int32_t) * s.max_tokens));
}

void GpuModelSource::enqueue(const BatchPlan& plan, uint32_t buffer, std::byte* capture,
                             uint64_t layer_bytes, cudaStream_t stream) {
  batches_[buffer] = tokens_.fetch(plan.batch_id);
  const data::TokenBatch& batch = batches_[buffer];
  DeviceCapture out;
  out.dtype = dtype_;
  out.greedy = labels_[buffer].as<int32_t>();
  const uint64_t row = uint64_t(hidden_) * dtype_size(dtype_);
  for (uint32_t k = 0; k < layers_; ++k) {
    // Split: K [max_tokens, H] regions. Concatenated: layer k's columns of [T, K*H], so
    // the D2H stays one contiguous DMA.
    out.layers.push_back(split_ ? CaptureRegion{capture + k * layer_bytes, row}
                                : CaptureRegion{capture + k * row, row * layers_});
  }
  model_->forward_device(PackedBatch{batch.tokens, batch.positions, batch.doc_offsets}, request_,
                         stream, out);
}

void GpuModelSource::write_metadata(uint32_t buffer, const Ring& ring, uint32_t slot) const {
  const data::TokenBatch& batch = batches_[buffer];
  std::copy(batch.tokens.begin(), batch.tokens.end(), ring.tokens(slot));
  std::copy(batch.positions.begin(), batch.positions.end(), ring.positions(slot));
  std::copy(batch.doc_offsets.begin(), batch.doc_offsets.end(), ring.doc_offsets(slot));
}

bool GpuModelSource::masks_labels(uint32_t buffer) const {
  return data::masks_any_label(batches_[buffer]);
}

void GpuModelSource::mask_labels(uint32_t buffer, const Ring& ring, uint32_t slot) const {
  data::mask_target_labels(batches_[buffer], ring.labels(slot));
}

}  // namespace hsring
