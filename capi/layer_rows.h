// Where captured layer k's rows lie in a slot, in either layout: K regions [T, H] (rows
// H elements apart) or one [T, K*H] region (layer k in columns k*H .. (k+1)*H of each
// row). Host writes, CUDA pitched copies and consumers' views all use this one answer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "shm/ring.h"

namespace hsring::capi {

struct LayerRows {
  std::byte* first;    // layer k's row 0
  uint64_t pitch;      // bytes from one row to the next
  uint64_t row_bytes;  // bytes of one row of one layer: H * elem
};

// REQUIRES: slot < ring.slot_count(), layer < ring.shape().num_layers.
inline LayerRows layer_rows(const Ring& ring, uint32_t slot, uint32_t layer) {
  const RingShape& s = ring.shape();
  const uint64_t row_bytes = uint64_t(s.hidden_size) * dtype_size(s.dtype);
  if (s.split_layers) return {ring.layer_region(slot, layer), row_bytes, row_bytes};
  return {ring.layer_region(slot, 0) + layer * row_bytes, row_bytes * s.num_layers, row_bytes};
}

}  // namespace hsring::capi
