// The block attention's wgmma kernels (train/cuda_block_attention_wgmma.cu, built for sm_90a
// only), as the launchers of train/cuda_block_attention_bf16.cu call them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "train/block_attention_bf16_device.cuh"

namespace hsring::train::cuda::attention_bf16 {

// True when the key-side wgmma kernel takes this head_dim (128) and the current GPU runs
// its sm_90a image (an H100 or H200).
bool wgmma_backward_key_available(uint32_t head_dim);

// dk, dv of the work items as backward_key_kernel of train/cuda_block_attention_bf16.cu
// writes them (the same outputs and partial slots), on warpgroup products.
cudaError_t launch_backward_key_wgmma(const Args& a, uint32_t work_count, cudaStream_t stream);

}  // namespace hsring::train::cuda::attention_bf16
