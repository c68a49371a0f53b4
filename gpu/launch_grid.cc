#include "gpu/launch_grid.h"

#include <cuda_runtime_api.h>

namespace hsring::gpu {

namespace {

constexpr int kFallbackSms = 132;  // an H100/H200, when CUDA cannot say

// The current device's, read once: a worker process uses one GPU.
uint64_t sm_count() {
  static const uint64_t sms = [] {
    int device = 0, count = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      (void)cudaGetLastError();
      count = kFallbackSms;
    }
    return uint64_t(count);
  }();
  return sms;
}

}  // namespace

unsigned grid_stride_blocks(uint64_t work_items, uint32_t items_per_block, uint32_t blocks_per_sm) {
  const uint64_t needed = (work_items + items_per_block - 1) / items_per_block;
  const uint64_t cap = sm_count() * blocks_per_sm;
  if (needed == 0) return 1;
  return unsigned(needed < cap ? needed : cap);
}

}  // namespace hsring::gpu
