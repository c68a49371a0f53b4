// The target's causal attention on Hopper's warpgroup products (model/cuda_attention_wgmma.cu,
// built for sm_90a only), as launch_attention (model/cuda_kernels.h) takes it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "model/cuda_kernels.h"

namespace hsring {

// True when the wgmma kernel takes this head_dim (128 or 256) and the current GPU runs its
// sm_90a image (an H100 or H200).
bool attention_wgmma_available(uint32_t head_dim);

// launch_attention's output from its arguments (pack as its log2, pack_shift), on warpgroup
// products, 64 keys a step. REQUIRES: attention_wgmma_available(head_dim) and
// launch_attention's own requirements.
cudaError_t launch_attention_wgmma(const Bf16* q, const Bf16* k, const Bf16* v,
                                   const AttentionTile* tiles, uint32_t tile_count, uint32_t heads,
                                   uint32_t kv_heads, uint32_t head_dim, int pack_shift, Bf16* out,
                                   cudaStream_t stream);

}  // namespace hsring
