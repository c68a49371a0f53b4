#include "train/drafter_layer_checks.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "common/contract.h"

namespace hsring::train {

std::string validate_drafter_layer(const DecoderLayerShape& layer, double rope_theta,
                                   uint32_t vocab_size) {
  HSRING_REQUIRE(layer.kv_heads > 0);
  if (layer.heads % layer.kv_heads != 0)
    return fmt::format("num_heads ({}) must be a multiple of num_kv_heads ({})", layer.heads,
                       layer.kv_heads);
  if (layer.head_dim % 2 != 0)
    return fmt::format("head_dim ({}) must be even for RoPE", layer.head_dim);
  if (!(rope_theta > 1.0) || !std::isfinite(rope_theta))
    return fmt::format("rope_theta must be a finite number above 1, not {}", rope_theta);
  if (!(layer.eps > 0.0) || !std::isfinite(layer.eps))
    return fmt::format("rms_norm_eps must be a finite positive number, not {}", layer.eps);
  if (vocab_size > uint32_t(std::numeric_limits<int32_t>::max()))
    return "vocab_size must fit int32 labels";
  return "";
}

}  // namespace hsring::train
