// A slot's captured layers DMAed from the (pinned) ring into a device array [T, K*H]: the
// layout a drafter trains on. In the split layout each layer's [T, H] region lands in its
// columns of every row through one pitched 2-D copy (cudaMemcpy2DAsync), so the
// concatenation costs no GPU pass; the concatenated layout is one contiguous copy.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "gpu/cuda_check.h"
#include "shm/ring.h"

namespace hsring {

// Enqueues the copy of `tokens` rows of slot `slot` into `dst` on `stream`.
// REQUIRES: dst holds tokens * K * H elements of the ring's dtype.
gpu::CudaStatus enqueue_slot_features(const Ring& ring, uint32_t slot, uint32_t tokens,
                                      std::byte* dst, cudaStream_t stream);

}  // namespace hsring
