// The mixture-of-experts MLP block of the CUDA forward (Qwen3-MoE, Qwen3.5-MoE): one layer's
// x += sum_k p_k expert_k(m) (+ sigmoid(m g) shared(m)), m = RMSNorm(x), over the kernels of
// model/cuda_moe.h and cuBLAS, all on one stream without a host round trip.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "model/cuda_blas.h"
#include "model/cuda_scratch.h"
#include "model/cuda_weights.h"
#include "model/model_config.h"

namespace hsring {

// Adds layer `w`'s mixture (post-attention norm included) into a.residual's first `rows`
// rows, on `s`; `blas` must be bound to `s`. The router's choices stay in
// a.expert_choices (ExpertChoice [rows * top_k]) for whoever wants to look.
// REQUIRES: config.has_experts(), w a mixture-of-experts layer of it, a grown for >= rows
// tokens. Throws Error(kCuda).
void run_moe_mlp(Blas& blas, const ModelConfig& config, const DeviceLayerWeights& w,
                 ForwardActivations& a, uint32_t rows, cudaStream_t s);

}  // namespace hsring
