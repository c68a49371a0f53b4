// What one target forward costs in FLOPs, as bench/forward_bench reports its rate and as
// hsring run's --split auto weighs targets against drafters (launcher/gpu_split.h).
#pragma once

#include "model/model_config.h"

namespace hsring {

// Tokens per chunk of the chunked delta rule (model/cuda_delta_net.h's kernels).
inline constexpr uint32_t kDeltaRuleChunk = 64;

// The parameters that act as matmuls on a token: every weight but the embedding gather (a
// tied head reuses the embedding as one). Mixture-of-experts layers count the router, the
// shared expert and the top-k experts a token runs through, not the idle ones.
double matmul_parameters(const ModelConfig& config);
// One attention layer over queries that see `keys_seen` keys in all (the sum over tokens
// of the keys each attends to, itself included): 4 head_dim FLOPs a head and pair.
double attention_layer_flops(const ModelConfig& config, double keys_seen);
// One DeltaNet layer's chunked delta rule over `tokens` tokens, as its kernels compute it.
double delta_rule_layer_flops(const DeltaNetShape& shape, double tokens);
// The whole forward: 2 FLOPs a matmul parameter and token, and the layers' mixing.
double forward_flops(const ModelConfig& config, double tokens, double keys_seen);

}  // namespace hsring
