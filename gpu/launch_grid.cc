#include "gpu/launch_grid.h"

#include <cuda_runtime_api.h>

namespace hsring::gpu {

namespace {

constexpr uint64_t kBlocksPerSm = 8;
constexpr int kFallbackSms = 132;  // an H100/H200, when CUDA cannot say

// The current device's, read once: a worker process uses one GPU.
uint64_t block_cap() {
  static const uint64_t cap = [] {
    int device = 0, sms = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      (void)cudaGetLastError();
      sms = kFallbackSms;
    }
    return uint64_t(sms) * kBlocksPerSm;
  }();
  return cap;
}

}  // namespace

unsigned grid_stride_blocks(uint64_t work_items, uint32_t items_per_block) {
  const uint64_t needed = (work_items + items_per_block - 1) / items_per_block;
  if (needed == 0) return 1;
  return unsigned(needed < block_cap() ? needed : block_cap());
}

}  // namespace hsring::gpu
