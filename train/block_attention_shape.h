// The shape of the DFlash drafter's block attention (train/block_attention.h has the rule and
// the CPU op, train/cuda_block_attention.h the CUDA kernels), in its own C++17 header so that
// both take this one struct.
#pragma once

#include <cstddef>

namespace hsring::train {

struct BlockAttentionShape {
  size_t blocks = 0;        // NB: draft blocks
  size_t block_size = 0;    // B: query (and block key) rows per block
  size_t context_rows = 0;  // rows of the context keys and values
  size_t heads = 0;
  size_t kv_heads = 0;  // query head h reads KV head h / (heads / kv_heads)
  size_t head_dim = 0;  // scores are scaled by 1 / sqrt(head_dim)

  size_t rows() const { return blocks * block_size; }  // query rows
};

}  // namespace hsring::train
