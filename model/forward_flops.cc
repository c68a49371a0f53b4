#include "model/forward_flops.h"

namespace hsring {

double matmul_parameters(const ModelConfig& c) {
  const double embedding = double(c.vocab_size) * double(c.hidden_size);
  // The experts a token does not run through cost it nothing.
  const MoeShape& m = c.moe;
  const double idle_expert = 3.0 * c.hidden_size * m.expert_intermediate;
  double idle = 0;
  for (uint32_t i = 0; i < c.num_layers; ++i)
    if (c.mlp_kind(i) == MlpKind::kExperts)
      idle += double(m.num_experts - m.experts_per_token) * idle_expert;
  return double(parameter_count(c)) - (c.tie_embeddings ? 0.0 : embedding) - idle;
}

double attention_layer_flops(const ModelConfig& c, double keys_seen) {
  return 4.0 * c.head_dim * c.num_heads * keys_seen;
}

double delta_rule_layer_flops(const DeltaNetShape& dn, double tokens) {
  // Per token and value head (C the chunk): the k.k and q.k scores 2 C dk, the triangular
  // solve (C - 1)(dk + dv), W S, Q S and K^T U 6 dk dv, P U 2 C dv.
  const double chunk = kDeltaRuleChunk;
  return tokens * dn.v_heads *
         (2 * chunk * dn.qk_head_dim + (chunk - 1) * (dn.qk_head_dim + dn.v_head_dim) +
          6.0 * dn.qk_head_dim * dn.v_head_dim + 2 * chunk * dn.v_head_dim);
}

double forward_flops(const ModelConfig& c, double tokens, double keys_seen) {
  double mixing = 0;
  for (uint32_t i = 0; i < c.num_layers; ++i)
    mixing += c.kind(i) == LayerKind::kDeltaNet ? delta_rule_layer_flops(c.delta_net, tokens)
                                                : attention_layer_flops(c, keys_seen);
  return 2.0 * matmul_parameters(c) * tokens + mixing;
}

}  // namespace hsring
