#include "model/cpu_moe.h"

#include <algorithm>
#include <cmath>

#include "model/decoder_layer.h"
#include "ops/linear.h"

namespace hsring {

namespace {

void ensure(std::vector<float>& buffer, size_t size) {
  if (buffer.size() < size) buffer.resize(size);
}

}  // namespace

void swiglu_mlp(const float* x, size_t rows, size_t hidden, const float* gate_proj,
                const float* up_proj, const float* down_proj, size_t width, MlpScratch& scratch,
                float* out, uint32_t threads) {
  ensure(scratch.gate, rows * width);
  ensure(scratch.up, rows * width);
  // The decoder layer's MLP (without its norm and skip); SwiGLU overwrites gate.
  const MlpBlockParams<const float*> w{nullptr, gate_proj, up_proj, down_proj};
  swiglu_mlp_forward(x, rows, hidden, w, width, scratch.gate.data(), scratch.up.data(),
                     scratch.gate.data(), out, ops::Sums::kFloat, threads);
}

void moe_mlp(const float* x, size_t rows, size_t hidden, const MoeShape& shape,
             const MoeWeights& weights, MlpScratch& scratch, float* out, uint32_t threads) {
  const size_t experts = shape.num_experts;
  const size_t top_k = shape.experts_per_token;
  ensure(scratch.router, rows * experts);
  scratch.choices.resize(rows * top_k);
  ops::linear_forward(x, rows, hidden, weights.router.data(), experts, scratch.router.data(),
                      ops::Sums::kFloat, threads);
  for (size_t r = 0; r < rows; ++r)
    route_token(scratch.router.data() + r * experts, uint32_t(experts), uint32_t(top_k),
                shape.normalise_top_k, scratch.choices.data() + r * top_k);

  // Group the (row, rank) slots by expert (a counting sort), so each expert's weights are
  // read once for all the rows that chose it.
  std::vector<uint32_t>& first = scratch.expert_begin;
  first.assign(experts + 1, 0);
  for (const ExpertChoice& c : scratch.choices) ++first[c.expert + 1];
  for (size_t e = 0; e < experts; ++e) first[e + 1] += first[e];
  scratch.slots.resize(rows * top_k);
  scratch.next.assign(first.begin(), first.end() - 1);
  for (size_t s = 0; s < rows * top_k; ++s)
    scratch.slots[scratch.next[scratch.choices[s].expert]++] = uint32_t(s);
  ensure(scratch.expert_out, rows * top_k * hidden);
  for (size_t e = 0; e < experts; ++e) {
    const size_t n = first[e + 1] - first[e];
    if (n == 0) continue;
    ensure(scratch.gathered, n * hidden);
    const uint32_t* slots = scratch.slots.data() + first[e];
    for (size_t i = 0; i < n; ++i) {
      const float* row = x + (slots[i] / top_k) * hidden;
      std::copy(row, row + hidden, scratch.gathered.begin() + std::ptrdiff_t(i * hidden));
    }
    // The expert's outputs land in gathered's order; copied to their slots below.
    // ops::linear_forward gives each element exactly dot(row, weight row), so gathering changes no
    // bit.
    ensure(scratch.shared_out, n * hidden);
    const SwigluWeights& w = weights.experts[e];
    swiglu_mlp(scratch.gathered.data(), n, hidden, w.gate_proj.data(), w.up_proj.data(),
               w.down_proj.data(), shape.expert_intermediate, scratch, scratch.shared_out.data(),
               threads);
    for (size_t i = 0; i < n; ++i)
      std::copy(scratch.shared_out.begin() + std::ptrdiff_t(i * hidden),
                scratch.shared_out.begin() + std::ptrdiff_t((i + 1) * hidden),
                scratch.expert_out.begin() + std::ptrdiff_t(size_t(slots[i]) * hidden));
  }
  // Each row: its experts in rank order, weight times output (fp32, as transformers).
  for (size_t r = 0; r < rows; ++r) {
    float* dst = out + r * hidden;
    std::fill(dst, dst + hidden, 0.0f);
    for (size_t k = 0; k < top_k; ++k) {
      const float weight = scratch.choices[r * top_k + k].weight;
      const float* y = scratch.expert_out.data() + (r * top_k + k) * hidden;
      for (size_t i = 0; i < hidden; ++i) dst[i] += weight * y[i];
    }
  }
  if (shape.shared_intermediate == 0) return;
  ensure(scratch.shared_out, rows * hidden);
  ensure(scratch.shared_gate, rows);
  const SwigluWeights& s = weights.shared;
  swiglu_mlp(x, rows, hidden, s.gate_proj.data(), s.up_proj.data(), s.down_proj.data(),
             shape.shared_intermediate, scratch, scratch.shared_out.data(), threads);
  ops::linear_forward(x, rows, hidden, weights.shared_gate.data(), 1, scratch.shared_gate.data(),
                      ops::Sums::kFloat, threads);
  for (size_t r = 0; r < rows; ++r) {
    const float gate = 1.0f / (1.0f + std::exp(-scratch.shared_gate[r]));
    for (size_t i = 0; i < hidden; ++i)
      out[r * hidden + i] += gate * scratch.shared_out[r * hidden + i];
  }
}

}  // namespace hsring
