// The two tensors of a target that a DFlash drafter reads and never trains: the input
// embedding (its blocks' tokens) and the LM head (its logits). Loaded alone, so a drafter
// process does not hold the target's every layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace hsring {

struct TargetHead {
  ModelConfig config;
  std::vector<float> embed;    // [V, H]
  std::vector<float> lm_head;  // [V, H]; empty when the config ties it to embed
};

// The head of model `spec` (a preset drawn from `seed`, the same values random_weights
// gives, or a Hugging Face folder of any architecture: config from model_outline_of, only
// the two tensors read). Throws Error like open_cpu_model.
TargetHead load_target_head(const std::string& spec, uint64_t seed);
// The head random_weights(config, seed) draws, alone.
TargetHead random_target_head(const ModelConfig& config, uint64_t seed);

}  // namespace hsring
