// What a Gated DeltaNet layer is, described once for the CPU layers (model/cpu_delta_net.h)
// and the CUDA kernels (model/cuda_delta_net.h), which take it by value. Its own header,
// C++17, so that the CUDA sources read it too.
#pragma once

#include <cstdint>

namespace hsring {

// The Gated DeltaNet (linear attention) layers of Qwen3.5: a short causal depthwise
// convolution over [q | k | v], then the gated delta rule per value head (query / key head
// h * qk_heads / v_heads), then a gated RMSNorm per value head.
struct DeltaNetShape {
  uint32_t qk_heads = 0, v_heads = 0;        // linear_num_key_heads, linear_num_value_heads
  uint32_t qk_head_dim = 0, v_head_dim = 0;  // linear_key_head_dim, linear_value_head_dim
  uint32_t conv_kernel = 0;                  // linear_conv_kernel_dim
  // constexpr: the CUDA kernels call them too (nvcc --expt-relaxed-constexpr).
  constexpr uint32_t qk_dim() const { return qk_heads * qk_head_dim; }
  constexpr uint32_t v_dim() const { return v_heads * v_head_dim; }
  constexpr uint32_t conv_dim() const { return 2 * qk_dim() + v_dim(); }  // q | k | v channels
};

}  // namespace hsring
