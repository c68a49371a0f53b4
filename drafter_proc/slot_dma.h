// A slot's captured layers DMAed from the (pinned) ring into a device array [T, K*H]: the
// layout a drafter trains on. In the split layout each layer's [T, H] region lands in its
// columns of every row through one pitched 2-D copy (cudaMemcpy2DAsync), so the
// concatenation costs no GPU pass; the concatenated layout is one contiguous copy.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "gpu/cuda_check.h"
#include "shm/slot_view.h"

namespace hsring {

// Enqueues the copy of the claimed batch's rows (batch.rows(): none when its header is out
// of bounds) into `dst` on `stream`.
// REQUIRES: dst holds batch.rows() * K * H elements of the ring's dtype.
gpu::CudaStatus enqueue_slot_features(const SlotView& batch, std::byte* dst, cudaStream_t stream);

}  // namespace hsring
