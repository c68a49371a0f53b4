// The shape of the same-position drafter (`--objective same-position`): a projection of K
// captured target layers to the drafter width, one decoder layer with sliding-window
// attention and an LM head, predicting the target's next token at every position
// (docs/drafter-training.md). Also the rule that derives one from its target. The DFlash
// drafter's shape is train/dflash_config.h.
#pragma once

#include <cstdint>
#include <string>

#include "model/decoder_layer_shape.h"
#include "model/model_config.h"

namespace hsring::train {

struct SamePositionConfig {
  uint32_t num_captured = 0;       // K: target layers concatenated per token
  uint32_t target_hidden = 0;      // H: the target's hidden size
  uint32_t width = 0;              // D: the drafter's hidden size
  uint32_t num_heads = 0;          // query heads
  uint32_t num_kv_heads = 0;       // key/value heads (grouped-query attention)
  uint32_t head_dim = 0;           // even (RoPE pairs element i with i + head_dim / 2)
  uint32_t intermediate_size = 0;  // SwiGLU width
  uint32_t vocab_size = 0;         // LM head rows; labels must lie in [0, vocab_size)
  uint32_t window = 256;           // a token attends to itself and the window - 1 before it
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;
  // Adds embed_tokens[token] to the projected features, as EAGLE drafters do. Off by
  // default: the captured states at position t already carry token t (docs say why).
  bool embed_tokens = false;

  uint32_t feature_dim() const { return num_captured * target_hidden; }  // K * H
  uint32_t q_dim() const { return num_heads * head_dim; }
  uint32_t kv_dim() const { return num_kv_heads * head_dim; }
};

// "" when the config is usable, else what is wrong with it (the first problem found).
std::string validate_same_position_config(const SamePositionConfig& config);

// Throws Error(kModelBadConfig) with validate_same_position_config's message.
void check_same_position_config(const SamePositionConfig& config);

// The default drafter of `target` fed by `num_captured` captured layers: its decoder layer
// has the target's shape (width = hidden size, heads, KV heads, head dim, intermediate
// size, RoPE theta, RMS eps) and the target's vocabulary, so the target's LM head can
// initialise the drafter's. The tiny target (H 128) gives D 128, 4 / 2 heads of 32,
// intermediate 384, vocab 256. Throws Error(kModelBadConfig) when the target config is
// invalid or the result is.
SamePositionConfig default_same_position_config(const ModelConfig& target, uint32_t num_captured,
                                                uint32_t window = 256);

// One line for logs: "K 5 x H 128 -> D 128, heads 4/2 x 32, inter 384, vocab 256, window 256".
std::string describe(const SamePositionConfig& config);

// The same-position drafter's one decoder layer, as the CPU model and the CUDA step read it:
// RoPE over the whole head without QK-norm, attention over a sliding window.
DecoderLayerShape same_position_layer_shape(const SamePositionConfig& config);

}  // namespace hsring::train
