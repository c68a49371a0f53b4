#include "train/same_position_config.h"

#include <fmt/format.h>

#include <cstdint>
#include <utility>

#include "common/error.h"
#include "train/drafter_layer_checks.h"

namespace hsring::train {

std::string validate_same_position_config(const SamePositionConfig& c) {
  for (const auto& [value, name] : {std::pair{c.num_captured, "num_captured (K)"},
                                    {c.target_hidden, "target_hidden (H)"},
                                    {c.width, "width (D)"},
                                    {c.num_heads, "num_heads"},
                                    {c.num_kv_heads, "num_kv_heads"},
                                    {c.head_dim, "head_dim"},
                                    {c.intermediate_size, "intermediate_size"},
                                    {c.vocab_size, "vocab_size"},
                                    {c.window, "window"}}) {
    if (value == 0) return std::string(name) + " must be positive";
  }
  if (std::string why =
          validate_drafter_layer(same_position_layer_shape(c), c.rope_theta, c.vocab_size);
      !why.empty())
    return why;
  // Every tensor is indexed with size_t; the largest products must not overflow it, nor an
  // int64 shape: 2^40 elements per tensor is far beyond what a host can hold anyway.
  constexpr uint64_t kMaxTensor = uint64_t(1) << 40;
  if (uint64_t(c.feature_dim()) * c.width > kMaxTensor ||
      uint64_t(c.vocab_size) * c.width > kMaxTensor ||
      uint64_t(c.intermediate_size) * c.width > kMaxTensor)
    return "the config's tensors are too large";
  return "";
}

void check_same_position_config(const SamePositionConfig& config) {
  if (std::string why = validate_same_position_config(config); !why.empty())
    throw Error(Errc::kModelBadConfig, "drafter config: " + why);
}

SamePositionConfig default_same_position_config(const ModelConfig& target, uint32_t num_captured,
                                                uint32_t window) {
  if (std::string why = validate_config(target); !why.empty())
    throw Error(Errc::kModelBadConfig, "target model '" + target.name + "': " + why);
  SamePositionConfig c;
  c.num_captured = num_captured;
  c.target_hidden = target.hidden_size;
  c.width = target.hidden_size;
  c.num_heads = target.num_heads;
  c.num_kv_heads = target.num_kv_heads;
  c.head_dim = target.head_dim;
  c.intermediate_size = drafter_mlp_width(target);
  c.vocab_size = target.vocab_size;
  c.window = window;
  c.rope_theta = target.rope_theta;
  c.rms_norm_eps = target.rms_norm_eps;
  check_same_position_config(c);
  return c;
}

std::string describe(const SamePositionConfig& c) {
  return fmt::format("K {} x H {} -> D {}, heads {}/{} x {}, inter {}, vocab {}, window {}{}",
                     c.num_captured, c.target_hidden, c.width, c.num_heads, c.num_kv_heads,
                     c.head_dim, c.intermediate_size, c.vocab_size, c.window,
                     c.embed_tokens ? ", token embedding" : "");
}

DecoderLayerShape same_position_layer_shape(const SamePositionConfig& c) {
  return {.hidden = c.width,
          .heads = c.num_heads,
          .kv_heads = c.num_kv_heads,
          .head_dim = c.head_dim,
          .intermediate = c.intermediate_size,
          .window = c.window,
          .eps = c.rms_norm_eps};
}

}  // namespace hsring::train
