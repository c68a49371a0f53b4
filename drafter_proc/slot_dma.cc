#include "drafter_proc/slot_dma.h"

namespace hsring {

gpu::CudaStatus enqueue_slot_features(const Ring& ring, uint32_t slot, uint32_t tokens,
                                      std::byte* dst, cudaStream_t stream) {
  const RingShape& s = ring.shape();
  const uint64_t layers = s.num_layers;
  const uint64_t row_bytes = uint64_t(s.hidden_size) * dtype_size(s.dtype);
  if (!s.split_layers) {
    HSRING_CUDA_TRY(cudaMemcpyAsync(dst, ring.payload(slot), tokens * layers * row_bytes,
                                    cudaMemcpyHostToDevice, stream));
    return {};
  }
  for (uint32_t k = 0; k < layers; ++k) {
    // Layer k's [T, H] region into columns [k*H, (k+1)*H) of every row of [T, K*H].
    HSRING_CUDA_TRY(cudaMemcpy2DAsync(dst + k * row_bytes, layers * row_bytes,
                                      ring.layer_region(slot, k), row_bytes, row_bytes, tokens,
                                      cudaMemcpyHostToDevice, stream));
  }
  return {};
}

}  // namespace hsring
