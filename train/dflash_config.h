// The shape of a DFlash block-diffusion drafter (docs/drafter-training.md, "The DFlash
// drafter"): K captured target layers projected to the target's width, a stack of decoder
// layers with QK-norm whose keys and values read [context ; block], the target's frozen
// embedding and LM head, and the block size, mask token and loss decay of its training.
#pragma once

#include <cstdint>
#include <string>

#include "model/decoder_layer_shape.h"
#include "model/model_config.h"
#include "train/block_attention_shape.h"

namespace hsring::train {

struct DflashConfig {
  uint32_t num_captured = 0;       // K: target layers concatenated per token
  uint32_t target_hidden = 0;      // H: the target's hidden size, also the drafter's width D
  uint32_t num_layers = 1;         // draft decoder layers
  uint32_t num_heads = 0;          // query heads
  uint32_t num_kv_heads = 0;       // key/value heads (grouped-query attention)
  uint32_t head_dim = 0;           // even (RoPE pairs element i with i + head_dim / 2)
  uint32_t intermediate_size = 0;  // SwiGLU width
  uint32_t vocab_size = 0;         // rows of the target's embedding and LM head
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;
  uint32_t block_size = 16;   // B: the anchor and B - 1 masked positions, >= 2
  int32_t mask_token_id = 0;  // the token every non-anchor block position reads
  double loss_gamma = 7.0;    // position j's loss weighs exp(-(j - 1) / gamma)

  uint32_t width() const { return target_hidden; }                       // D
  uint32_t feature_dim() const { return num_captured * target_hidden; }  // K * H
  uint32_t q_dim() const { return num_heads * head_dim; }
  uint32_t kv_dim() const { return num_kv_heads * head_dim; }
};

// "" when the config is usable, else what is wrong with it (the first problem found).
std::string validate_dflash_config(const DflashConfig& config);

// Throws Error(kModelBadConfig) with validate_dflash_config's message.
void check_dflash_config(const DflashConfig& config);

// The DFlash drafter of `target` fed by `num_captured` captured layers, with `num_layers`
// decoder layers of the target's shape (hidden size, heads, KV heads, head dim,
// intermediate size, vocabulary, RoPE theta, RMS eps), B 16 and gamma 7. The mask token is
// the vocabulary's last row: set the tokenizer's own mask token when it has one. Throws
// Error(kModelBadConfig) when the target config is invalid or the result is.
DflashConfig default_dflash_config(const ModelConfig& target, uint32_t num_captured,
                                   uint32_t num_layers);

// Draft layers when none are asked for: 5 as the published DFlash drafters have, 1 for a
// target narrower than 1024 (the built-in tiny one, trained on a CPU).
uint32_t default_draft_layers(const ModelConfig& target);
// The loss decay gamma for block size B: 7 at B = 16 (the paper's), in proportion to B.
double default_loss_gamma(uint32_t block_size);

// One line for logs: "dflash K 5 x H 128, 1 layers, heads 4/2 x 32, inter 384, vocab 256,
// block 16, mask 255, gamma 7".
std::string describe(const DflashConfig& config);

// The DFlash drafter's decoder layer, as the CPU model and the CUDA step read it: Qwen3's
// (QK-norm, RoPE over the whole head, no biases, no output gate, no window).
DecoderLayerShape dflash_layer_shape(const DflashConfig& config);

// Its block attention over `blocks` draft blocks and `context_rows` context rows, as the CPU
// model and the CUDA step read it.
BlockAttentionShape dflash_attention_shape(const DflashConfig& config, size_t blocks,
                                           size_t context_rows);

}  // namespace hsring::train
