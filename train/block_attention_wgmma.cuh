// The block attention's wgmma kernels (train/cuda_block_attention_wgmma.cu, built for sm_90a
// only), as the launchers of train/cuda_block_attention_bf16.cu call them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "train/block_attention_bf16_device.cuh"

namespace hsring::train::attention_bf16 {

// True when the wgmma kernels take this head_dim (128) and the current GPU runs their
// sm_90a images (an H100 or H200).
bool wgmma_available(uint32_t head_dim);

// The outputs of train/cuda_block_attention_bf16.cu's kernels of the same names, from the
// same arguments, on warpgroup products: dk, dv of the work items (the same partial slots);
// dq; the forward's out, out_bf16 and lse.
cudaError_t launch_backward_key_wgmma(const Args& a, uint32_t work_count, cudaStream_t stream);
cudaError_t launch_backward_query_wgmma(const Args& a, cudaStream_t stream);
cudaError_t launch_forward_wgmma(const Args& a, cudaStream_t stream);

}  // namespace hsring::train::attention_bf16
