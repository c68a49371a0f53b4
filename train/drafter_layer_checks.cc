#include "train/drafter_layer_checks.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "common/contract.h"

namespace hsring::train {

std::string validate_drafter_layer(const DrafterLayerFields& s) {
  HSRING_REQUIRE(s.num_kv_heads > 0);
  if (s.num_heads % s.num_kv_heads != 0)
    return fmt::format("num_heads ({}) must be a multiple of num_kv_heads ({})", s.num_heads,
                       s.num_kv_heads);
  if (s.head_dim % 2 != 0) return fmt::format("head_dim ({}) must be even for RoPE", s.head_dim);
  if (!(s.rope_theta > 1.0) || !std::isfinite(s.rope_theta))
    return fmt::format("rope_theta must be a finite number above 1, not {}", s.rope_theta);
  if (!(s.rms_norm_eps > 0.0) || !std::isfinite(s.rms_norm_eps))
    return fmt::format("rms_norm_eps must be a finite positive number, not {}", s.rms_norm_eps);
  if (s.vocab_size > uint32_t(std::numeric_limits<int32_t>::max()))
    return "vocab_size must fit int32 labels";
  return "";
}

}  // namespace hsring::train
