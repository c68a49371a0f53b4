// The checks every drafter config makes of its decoder layers (the same-position drafter's
// one layer, the DFlash drafter's stack): heads, RoPE, norms and vocabulary, written once
// over the layer's one description (model/decoder_layer_shape.h).
#pragma once

#include <cstdint>
#include <string>

#include "model/decoder_layer_shape.h"

namespace hsring::train {

// "" when the layer is usable, else the first problem, named by the config's fields: query
// heads (num_heads) not a multiple of the key/value heads (num_kv_heads), an odd head_dim
// (RoPE pairs element i with i + head_dim / 2), a RoPE base (rope_theta) or norm epsilon
// (rms_norm_eps) that is not a finite positive number (the base above 1), a vocabulary
// (vocab_size) past int32 labels. REQUIRES: every count already checked positive (the caller
// names its own zero fields).
std::string validate_drafter_layer(const DecoderLayerShape& layer, double rope_theta,
                                   uint32_t vocab_size);

}  // namespace hsring::train
