#include "train/dflash_config.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <utility>

#include "common/error.h"
#include "train/drafter_layer_checks.h"

namespace hsring::train {

namespace {

std::string number(double value) {
  std::string text = std::to_string(value);
  while (!text.empty() && text.back() == '0') text.pop_back();
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text;
}

}  // namespace

std::string validate_dflash_config(const DflashConfig& c) {
  for (const auto& [value, name] : {std::pair{c.num_captured, "num_captured (K)"},
                                    {c.target_hidden, "target_hidden (H)"},
                                    {c.num_layers, "num_layers"},
                                    {c.num_heads, "num_heads"},
                                    {c.num_kv_heads, "num_kv_heads"},
                                    {c.head_dim, "head_dim"},
                                    {c.intermediate_size, "intermediate_size"},
                                    {c.vocab_size, "vocab_size"}}) {
    if (value == 0) return std::string(name) + " must be positive";
  }
  if (std::string why = validate_drafter_layer(dflash_layer_shape(c), c.rope_theta, c.vocab_size);
      !why.empty())
    return why;
  if (c.block_size < 2 || c.block_size > 4096)
    return fmt::format(
        "block_size must be in [2, 4096] (an anchor and at least one masked position), not {}",
        c.block_size);
  if (c.mask_token_id < 0 || uint32_t(c.mask_token_id) >= c.vocab_size)
    return fmt::format("mask_token_id {} is outside the vocabulary of {}", c.mask_token_id,
                       c.vocab_size);
  if (!(c.loss_gamma > 0.0) || !std::isfinite(c.loss_gamma))
    return "loss_gamma must be a finite positive number, not " + number(c.loss_gamma);
  if (c.num_layers > 1024) return "num_layers must be at most 1024";
  // Every tensor is indexed with size_t and shaped in int64: keep each far below both.
  constexpr uint64_t kMaxTensor = uint64_t(1) << 40;
  const uint64_t d = c.width();
  if (uint64_t(c.feature_dim()) * d > kMaxTensor || uint64_t(c.vocab_size) * d > kMaxTensor ||
      uint64_t(c.intermediate_size) * d > kMaxTensor || uint64_t(c.q_dim()) * d > kMaxTensor)
    return "the config's tensors are too large";
  return "";
}

void check_dflash_config(const DflashConfig& config) {
  if (std::string why = validate_dflash_config(config); !why.empty())
    throw Error(Errc::kModelBadConfig, "dflash config: " + why);
}

uint32_t default_draft_layers(const ModelConfig& target) {
  return target.hidden_size < 1024 ? 1 : 5;
}

double default_loss_gamma(uint32_t block_size) { return 7.0 * double(block_size) / 16.0; }

DflashConfig default_dflash_config(const ModelConfig& target, uint32_t num_captured,
                                   uint32_t num_layers) {
  if (std::string why = validate_config(target); !why.empty())
    throw Error(Errc::kModelBadConfig, "target model '" + target.name + "': " + why);
  DflashConfig c;
  c.num_captured = num_captured;
  c.target_hidden = target.hidden_size;
  c.num_layers = num_layers;
  c.num_heads = target.num_heads;
  c.num_kv_heads = target.num_kv_heads;
  c.head_dim = target.head_dim;
  c.intermediate_size = drafter_mlp_width(target);
  c.vocab_size = target.vocab_size;
  c.rope_theta = target.rope_theta;
  c.rms_norm_eps = target.rms_norm_eps;
  c.mask_token_id = int32_t(target.vocab_size) - 1;
  check_dflash_config(c);
  return c;
}

std::string describe(const DflashConfig& c) {
  return fmt::format(
      "dflash K {} x H {}, {} layers, heads {}/{} x {}, inter {}, vocab {}, block {}, mask {}, "
      "gamma {}",
      c.num_captured, c.target_hidden, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim,
      c.intermediate_size, c.vocab_size, c.block_size, c.mask_token_id, number(c.loss_gamma));
}

DecoderLayerShape dflash_layer_shape(const DflashConfig& c) {
  return {.hidden = c.width(),
          .heads = c.num_heads,
          .kv_heads = c.num_kv_heads,
          .head_dim = c.head_dim,
          .intermediate = c.intermediate_size,
          .eps = c.rms_norm_eps,
          .qk_norm = true};
}

BlockAttentionShape dflash_attention_shape(const DflashConfig& c, size_t blocks,
                                           size_t context_rows) {
  return {.blocks = blocks,
          .block_size = c.block_size,
          .context_rows = context_rows,
          .heads = c.num_heads,
          .kv_heads = c.num_kv_heads,
          .head_dim = c.head_dim};
}

}  // namespace hsring::train
