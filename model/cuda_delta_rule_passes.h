// What the chunked delta rule's passes share (model/cuda_delta_rule.cu: both TF32 passes;
// model/cuda_delta_prepare_bf16.cu and model/cuda_delta_state_bf16.cu: the bf16 ones): the
// scratch pass 1 writes and pass 2 reads, and the bf16 passes' launchers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "model/cuda_delta_net.h"

namespace hsring {

// Row-major, one row per token:
//   - the TF32 paths, per value head: W fp32 [qk_head_dim] and P fp32 [kDeltaChunk] (TF32
//     operands) and U' fp32 [v_head_dim];
//   - the bf16 rule, pass 2's operands in bf16, per value head: W [qk_head_dim], P
//     [kDeltaChunk] and U' [v_head_dim] (Q and K pass 2 reads from the convolution's rows);
//   - both: G fp32 [v_heads] (the running sum of g within the chunk).
// The bf16 arrays come first, those read by cp.async (W, P) 16-byte aligned when the base
// is.
struct DeltaScratch {
  float* w = nullptr;
  float* p = nullptr;
  float* u = nullptr;
  Bf16* w_bf16 = nullptr;
  Bf16* p_bf16 = nullptr;
  Bf16* u_bf16 = nullptr;
  float* g_sum = nullptr;
};
DeltaScratch delta_scratch_parts(float* base, uint32_t rows, DeltaNetShape shape, bool bf16);

// The passes of the bf16 rule (launch_delta_rule): pass 1 writes the scratch
// (model/cuda_delta_prepare_bf16.cu), pass 2 reads it and Q and K from qkv
// (model/cuda_delta_state_bf16.cu).
cudaError_t launch_delta_prepare_bf16(const Bf16* qkv, const float* g, const float* beta,
                                      DeltaNetShape shape, const DeltaSpan* chunks,
                                      uint32_t chunk_count, const DeltaScratch& scratch,
                                      cudaStream_t stream);
cudaError_t launch_delta_state_bf16(const Bf16* qkv, DeltaNetShape shape,
                                    const DeltaSpan* documents, uint32_t document_count,
                                    const DeltaScratch& scratch, Bf16* out, cudaStream_t stream);

}  // namespace hsring
