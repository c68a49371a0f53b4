#include "drafter_proc/slot_dma.h"

namespace hsring {

gpu::CudaStatus enqueue_slot_features(const SlotView& batch, std::byte* dst, cudaStream_t stream) {
  const RingShape& s = batch.shape();
  const uint64_t layers = s.num_layers;
  const uint64_t row_bytes = uint64_t(s.hidden_size) * dtype_size(s.dtype);
  const uint64_t tokens = batch.rows();
  if (tokens == 0) return {};
  if (!s.split_layers) {
    const std::span<const std::byte> rows = batch.region_bytes(0);
    HSRING_CUDA_TRY(cudaMemcpyAsync(dst, rows.data(), rows.size(), cudaMemcpyHostToDevice, stream));
    return {};
  }
  for (uint32_t k = 0; k < layers; ++k) {
    // Layer k's [T, H] region into columns [k*H, (k+1)*H) of every row of [T, K*H].
    HSRING_CUDA_TRY(cudaMemcpy2DAsync(dst + k * row_bytes, layers * row_bytes,
                                      batch.region_bytes(k).data(), row_bytes, row_bytes, tokens,
                                      cudaMemcpyHostToDevice, stream));
  }
  return {};
}

}  // namespace hsring
