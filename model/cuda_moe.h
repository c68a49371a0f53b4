// The kernels of the CUDA forward's mixture-of-experts MLP (Qwen3-MoE, Qwen3.5-MoE), behind
// plain host functions: the router's input in two bf16 parts (so its logits are fp32-exact
// products), the routing of model/moe_router.h per token, the grouping of (token, rank)
// slots by expert on the device, a grouped bf16 GEMM over each expert's rows, and the
// weighted sum back into the residual. Nothing here copies to the host or waits: the
// grouped GEMM's grid is an upper bound known on the host (max_expert_tiles), and its
// blocks read their expert and rows from the tile list the grouping wrote. No atomics
// decide an order: every output element is one fixed sequence of operations, so a batch
// always gives the same bits and a token's result does not depend on its neighbours.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "model/cuda_kernels.h"
#include "model/moe_router.h"

namespace hsring {

// Rows of one tile of the grouped GEMM: an expert's rows are cut into tiles of this many.
inline constexpr uint32_t kExpertRowTile = 128;
// Slots per block of the grouping kernels.
inline constexpr uint32_t kGroupChunk = 1024;

// The rows [row_begin, row_end) of the grouped order that belong to `expert`, at most
// kExpertRowTile of them; expert -1 marks an unused entry of the list.
struct ExpertTile {
  int32_t expert;
  int32_t row_begin;
  int32_t row_end;
  int32_t unused;
};

// Tiles any routing of `slots` (tokens x top_k) slots over `experts` experts can need:
// ceil(slots / kExpertRowTile) + experts (each expert's last tile may be partial).
inline uint32_t max_expert_tiles(uint64_t slots, uint32_t experts) {
  return uint32_t((slots + kExpertRowTile - 1) / kExpertRowTile) + experts;
}
inline uint32_t group_chunks(uint64_t slots) {
  return uint32_t((slots + kGroupChunk - 1) / kGroupChunk);
}

// n = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight in fp32, written as hi = bf16(n) and
// lo = bf16(n - hi): hi + lo keeps 16 significant bits of n, so a product of [hi; lo] with
// bf16 weights, accumulated in fp32, is the fp32 product within fp32 rounding (the router:
// its top-k flips on small differences). x fp32 [rows, dim].
cudaError_t launch_rms_norm_split(const float* x, const float* weight, uint32_t rows, uint32_t dim,
                                  float eps, Bf16* hi, Bf16* lo, cudaStream_t stream);

// route_token (model/moe_router.h) for each row of logits fp32 [rows, stride] (its first
// `experts` columns, turned into probabilities in place): choices[r * top_k + k].
cudaError_t launch_route(float* logits, uint32_t rows, uint64_t stride, uint32_t experts,
                         uint32_t top_k, bool normalise, ExpertChoice* choices,
                         cudaStream_t stream);

// Device arrays of one grouping, `slots` = rows * top_k.
struct ExpertGroups {
  int32_t* chunk_counts = nullptr;  // [group_chunks(slots), experts]
  int32_t* expert_begin = nullptr;  // [experts + 1]: expert e's rows of the grouped order
  int32_t* slot_row = nullptr;      // [slots]: where slot s (row * top_k + rank) stands
  int32_t* row_token = nullptr;     // [slots]: the token of grouped row p
  ExpertTile* tiles = nullptr;      // [max_expert_tiles(slots, experts)]
};

// A stable counting sort of the slots by expert (slot order within an expert), and the tile
// list of the grouped GEMM: each expert's rows cut into kExpertRowTile-row tiles, in expert
// order, the rest of the list marked unused. Three kernels, no host round trip.
// REQUIRES: 1 <= experts <= 4096; every choice's expert < experts.
cudaError_t launch_group_by_expert(const ExpertChoice* choices, uint32_t slots, uint32_t top_k,
                                   uint32_t experts, const ExpertGroups& groups,
                                   cudaStream_t stream);

// y[p, o] = sum_i x[a(p), i] w_e[o, i] for every grouped row p of every tile, e the tile's
// expert: a(p) = x_rows[p] (a gather, e.g. row_token) or p when x_rows is null; w_e = w +
// e * w_stride, [out, in] (HF layout); y bf16 (rounded to nearest even) or fp32, row
// stride ldy. bf16 tensor cores, fp32 accumulation in a fixed order over `in`.
// REQUIRES: in, ldx and w_stride multiples of 8, x and w 16-byte aligned; out and ldy even.
struct GroupedProduct {
  const Bf16* x = nullptr;
  const int32_t* x_rows = nullptr;
  uint64_t ldx = 0;
  const Bf16* w = nullptr;
  uint64_t w_stride = 0;
  void* y = nullptr;
  bool y_fp32 = false;
  uint64_t ldy = 0;
  uint32_t in = 0, out = 0;
};
cudaError_t launch_grouped_linear(const GroupedProduct& product, const ExpertTile* tiles,
                                  uint32_t max_tiles, cudaStream_t stream);

// residual[t, :] += sum_k weight(t, k) y[slot_row[t * top_k + k], :] (ranks in order, fp32),
// + sigmoid(gate_logits[t * gate_stride]) shared[t, :] when `shared` is given, the sum
// formed before it is added (as transformers and the CPU forward). y fp32 [slots, hidden].
cudaError_t launch_moe_combine(const float* y, const ExpertChoice* choices, const int32_t* slot_row,
                               uint32_t rows, uint32_t top_k, uint32_t hidden, const float* shared,
                               const float* gate_logits, uint64_t gate_stride, float* residual,
                               cudaStream_t stream);

}  // namespace hsring
