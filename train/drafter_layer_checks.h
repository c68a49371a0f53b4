// The checks every drafter config makes of its decoder layers (the same-position drafter's
// one layer, the DFlash drafter's stack): heads, RoPE, norms and vocabulary, written once.
#pragma once

#include <cstdint>
#include <string>

namespace hsring::train {

// A drafter config's layer fields, as its config holds them (train/cuda_drafter_layer.h's
// DrafterLayerShape is the CUDA step's, a different thing).
struct DrafterLayerFields {
  uint32_t num_heads = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t vocab_size = 0;
  double rope_theta = 0;
  double rms_norm_eps = 0;
};

// "" when the fields are usable, else the first problem: query heads not a multiple of the
// key/value heads, an odd head_dim (RoPE pairs element i with i + head_dim / 2), a RoPE base
// or norm epsilon that is not a finite positive number (the base above 1), a vocabulary
// past int32 labels. REQUIRES: every count already checked positive (the caller names its
// own zero fields).
std::string validate_drafter_layer(const DrafterLayerFields& fields);

}  // namespace hsring::train
