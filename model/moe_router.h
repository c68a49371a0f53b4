// The router of a Qwen3 / Qwen3.5 mixture-of-experts MLP as transformers computes it: a
// softmax over the experts' logits, the top-k probabilities, renormalised to sum 1 when the
// config asks (norm_topk_prob; always in Qwen3.5-MoE). The one definition of the routing
// maths: header-only and free of allocation, so a CUDA forward can call it per token and
// pick exactly the experts the CPU forward picks.
#pragma once

#include <cmath>
#include <cstdint>

#ifndef HSRING_HOST_DEVICE
#ifdef __CUDACC__
#define HSRING_HOST_DEVICE __host__ __device__
#else
#define HSRING_HOST_DEVICE
#endif
#endif

namespace hsring {

struct ExpertChoice {
  uint32_t expert = 0;
  float weight = 0;  // the expert's output is scaled by it
};

// Routes one token: turns `logits` [num_experts] into fp32 probabilities in place (the
// sum in double, in expert order), then writes its top_k experts to `out` [top_k], most
// probable first; equal probabilities go to the lower expert id (torch.topk leaves that
// order unspecified, so a tie is the one place the two may pick differently).
// REQUIRES: 1 <= top_k <= num_experts; the logits are finite.
HSRING_HOST_DEVICE inline void route_token(float* logits, uint32_t num_experts, uint32_t top_k,
                                           bool normalise, ExpertChoice* out) {
  float peak = logits[0];
  for (uint32_t e = 1; e < num_experts; ++e) peak = logits[e] > peak ? logits[e] : peak;
  double sum = 0;
  for (uint32_t e = 0; e < num_experts; ++e) sum += exp(double(logits[e]) - double(peak));
  for (uint32_t e = 0; e < num_experts; ++e)
    logits[e] = float(exp(double(logits[e]) - double(peak)) / sum);
  // Selection in the order (probability descending, id ascending): each pick is the best
  // expert strictly after the previous one in that order, so nothing needs marking.
  double picked = 0;
  for (uint32_t k = 0; k < top_k; ++k) {
    int64_t best = -1;
    for (uint32_t e = 0; e < num_experts; ++e) {
      const float p = logits[e];
      if (k > 0) {
        const float prev = out[k - 1].weight;
        if (p > prev || (p == prev && e <= out[k - 1].expert)) continue;
      }
      if (best < 0 || p > logits[best]) best = e;
    }
    out[k].expert = uint32_t(best);
    out[k].weight = logits[best];
    picked += double(logits[best]);
  }
  if (normalise)
    for (uint32_t k = 0; k < top_k; ++k) out[k].weight = float(double(out[k].weight) / picked);
}

}  // namespace hsring
