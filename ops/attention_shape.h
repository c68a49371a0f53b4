// The shape of causal attention over packed documents, apart from ops/attention.h so that
// CUDA sources (C++17, no <span>) take the same struct: train/cuda_drafter_kernels.h's
// sliding-window kernels read it as the CPU op does.
#pragma once

#include <cstddef>

namespace hsring::ops {

// Token t of the document [s, e) attends to tokens max(s, t - window + 1) .. t: never across
// a document boundary, never more than `window` tokens (itself included); window 0: the whole
// document so far. Query head h reads KV head h / (heads / kv_heads); scores are scaled by
// 1 / sqrt(head_dim).
struct AttentionShape {
  size_t rows = 0;
  size_t heads = 0;
  size_t kv_heads = 0;
  size_t head_dim = 0;
  size_t window = 0;
};

}  // namespace hsring::ops
