#include "train/dflash_flops.h"

namespace hsring::train {

double dflash_step_flops(const DflashConfig& c, double tokens, double blocks,
                         double attention_pairs) {
  const double d = c.width(), rows = blocks * c.block_size, scored = blocks * (c.block_size - 1);
  const double layer_params =
      d * (2.0 * c.q_dim() + 2.0 * c.kv_dim()) + 3.0 * d * c.intermediate_size;
  const double last_layer_skipped =
      6.0 * (rows - scored) * (d * c.q_dim() + 3.0 * d * c.intermediate_size);
  return 4.0 * tokens * c.feature_dim() * d +
         c.num_layers * (6.0 * rows * layer_params + 6.0 * tokens * 2.0 * c.kv_dim() * d) -
         last_layer_skipped + 4.0 * scored * d * c.vocab_size +
         c.num_layers * (4.0 + 14.0) * double(c.head_dim) * c.num_heads * attention_pairs;
}

}  // namespace hsring::train
