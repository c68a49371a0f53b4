// What a decoder layer is (Llama / Qwen2 / Qwen3 / Qwen3.5's attention layers and the
// drafters'), described once for every implementation: the CPU layer (model/decoder_layer.h),
// the CUDA target's q/k/v finishing (model/cuda_kernels.h) and the CUDA drafter step
// (train/cuda_drafter_layer.h), each of which says which features it has. Its own header,
// C++17, so that the CUDA sources (nvcc compiles C++17) read it too.
#pragma once

#include <cstddef>

#include "ops/attention_shape.h"

namespace hsring {

struct DecoderLayerShape {
  size_t hidden = 0;
  size_t heads = 0;
  size_t kv_heads = 0;
  size_t head_dim = 0;
  size_t intermediate = 0;
  size_t rotary_dim = 0;  // RoPE'd dims of a head; 0: all of head_dim
  size_t window = 0;      // sliding attention window (itself included); 0: the whole document
  double eps = 1e-6;      // every RMSNorm's
  bool qk_norm = false;   // per-head RMSNorm of q and k before RoPE (Qwen3)
  bool qkv_bias = false;  // biases of q, k, v (Qwen2)
  // Qwen3.5: q_proj gives [q_h | gate_h] per head and the attention output is scaled by
  // sigmoid(gate). Forward only.
  bool attention_gate = false;

  size_t q_dim() const { return heads * head_dim; }
  size_t kv_dim() const { return kv_heads * head_dim; }
  // The layer's attention over `rows` packed rows (ops/attention_shape.h has the rule).
  ops::AttentionShape attention(size_t rows) const {
    return {rows, heads, kv_heads, head_dim, window};
  }
};

}  // namespace hsring
