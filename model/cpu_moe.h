// The SwiGLU MLPs of the CPU forward: a dense one, and a mixture of experts (Qwen3-MoE,
// Qwen3.5-MoE) built from it and the router of model/moe_router.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/model_config.h"
#include "model/model_weights.h"
#include "model/moe_router.h"

namespace hsring {

// Scratch of the MLPs, sized on demand and kept between forwards.
struct MlpScratch {
  std::vector<float> gate, up;                 // [rows, width]
  std::vector<float> router;                   // [rows, num_experts]
  std::vector<ExpertChoice> choices;           // [rows, top_k]
  std::vector<uint32_t> slots;                 // (row * top_k + rank) per expert, grouped
  std::vector<uint32_t> expert_begin, next;    // [num_experts + 1] into slots; fill cursors
  std::vector<float> gathered, expert_out;     // [n, H], [rows * top_k, H]
  std::vector<float> shared_out, shared_gate;  // an expert's [n, H], then the shared [rows, H]
};

// out[r] = down(silu(gate(x[r])) * up(x[r])): x [rows, hidden], the projections [width,
// hidden], [width, hidden] and [hidden, width] (HF layout). out may not alias x.
void swiglu_mlp(const float* x, size_t rows, size_t hidden, const float* gate_proj,
                const float* up_proj, const float* down_proj, size_t width, MlpScratch& scratch,
                float* out, uint32_t threads);

// The mixture as transformers computes it: each row routed (route_token), its experts'
// outputs scaled by their weights and summed in rank order, plus the shared expert scaled
// by sigmoid(x . shared_gate) where the shape has one. Each expert runs once over the rows
// that chose it; every output element is still one fixed sequence of operations on its own
// row, so a row's result does not depend on its neighbours or the thread count.
void moe_mlp(const float* x, size_t rows, size_t hidden, const MoeShape& shape,
             const MoeWeights& weights, MlpScratch& scratch, float* out, uint32_t threads);

}  // namespace hsring
