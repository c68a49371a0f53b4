#include "model/cuda_moe_mlp.h"

#include "gpu/cuda_check.h"
#include "gpu/ops/swiglu.h"
#include "model/cuda_moe.h"

namespace hsring {

void run_moe_mlp(Blas& blas, const ModelConfig& c, const DeviceLayerWeights& w,
                 ForwardActivations& a, uint32_t rows, cudaStream_t s) {
  const MoeShape& moe = c.moe;
  const uint32_t h = c.hidden_size;
  const uint32_t experts = moe.num_experts;
  const uint32_t top_k = moe.experts_per_token;
  const uint32_t slots = rows * top_k;
  const uint32_t ei = moe.expert_intermediate;
  const uint32_t si = moe.shared_intermediate;
  const uint32_t stride = router_rows(c);  // padded rows: one cuBLAS product at full rate
  auto* normed = a.normed.as<Bf16>();
  auto* logits = a.router_logits.as<float>();
  auto* choices = a.expert_choices.as<ExpertChoice>();
  // x += sum_k p_k expert_k(m) (+ sigmoid(m g) shared(m)), m = norm(x). The router reads m
  // as hi + lo (fp32-exact products): its top-k must pick what the fp32 CPU forward picks.
  HSRING_CUDA_CHECK(launch_rms_norm_split(a.residual.as<float>(), w.post_norm, rows, h,
                                          float(c.rms_norm_eps), normed, a.normed_lo.as<Bf16>(),
                                          s));
  blas.linear(normed, rows, h, w.router, stride, logits, true, stride);
  blas.linear(a.normed_lo.as<Bf16>(), rows, h, w.router, stride, logits, true, stride, 1.0f);
  HSRING_CUDA_CHECK(
      launch_route(logits, rows, stride, experts, top_k, moe.normalise_top_k, choices, s));
  const ExpertGroups groups{a.chunk_counts.as<int32_t>(), a.expert_begin.as<int32_t>(),
                            a.slot_row.as<int32_t>(), a.row_token.as<int32_t>(),
                            a.expert_tiles.as<ExpertTile>()};
  HSRING_CUDA_CHECK(launch_group_by_expert(choices, slots, top_k, experts, groups, s));
  const uint32_t tiles = max_expert_tiles(slots, experts);
  // Each expert's rows: gate/up (gathered from the tokens), SwiGLU, down.
  GroupedProduct up;
  up.x = normed;
  up.x_rows = groups.row_token;
  up.ldx = h;
  up.w = w.experts_gate_up;
  up.w_stride = uint64_t(2) * ei * h;
  up.y = a.expert_gate_up.data();
  up.ldy = 2 * ei;
  up.in = h;
  up.out = 2 * ei;
  HSRING_CUDA_CHECK(launch_grouped_linear(up, groups.tiles, tiles, s));
  HSRING_CUDA_CHECK(gpu::launch_swiglu_forward_fused(a.expert_gate_up.as<Bf16>(), slots, ei,
                                                     nullptr, s, a.expert_act.as<Bf16>(),
                                                     gpu::SiluPrecision::kRounded));
  GroupedProduct down;
  down.x = a.expert_act.as<Bf16>();
  down.ldx = ei;
  down.w = w.experts_down;
  down.w_stride = uint64_t(h) * ei;
  down.y = a.expert_out.data();
  down.y_fp32 = true;
  down.ldy = h;
  down.in = ei;
  down.out = h;
  HSRING_CUDA_CHECK(launch_grouped_linear(down, groups.tiles, tiles, s));
  if (si) {  // Qwen3.5's shared expert: every token, a dense SwiGLU
    blas.linear(normed, rows, h, w.shared_gate_up, 2 * si, a.shared_gate_up.data(), false, 2 * si);
    HSRING_CUDA_CHECK(gpu::launch_swiglu_forward_fused(a.shared_gate_up.as<Bf16>(), rows, si,
                                                       nullptr, s, a.shared_act.as<Bf16>(),
                                                       gpu::SiluPrecision::kRounded));
    blas.linear(a.shared_act.as<Bf16>(), rows, si, w.shared_down, h, a.shared_out.data(), true, h);
  }
  HSRING_CUDA_CHECK(launch_moe_combine(a.expert_out.as<float>(), choices, groups.slot_row, rows,
                                       top_k, h, si ? a.shared_out.as<float>() : nullptr,
                                       si ? logits + experts : nullptr, stride,
                                       a.residual.as<float>(), s));
}

}  // namespace hsring
