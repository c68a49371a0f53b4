// How many blocks a grid-stride kernel gets: enough to fill the current device (by default
// 8 blocks per SM, as many 256-thread blocks as an sm_90 SM holds at once) and no more; the
// kernel's loop strides over the rest. Kernels whose items vary in cost ask for more
// blocks per SM, so a block that finishes early is replaced by a waiting one.
#pragma once

#include <cstdint>

namespace hsring::gpu {

// Blocks for `work_items` items when one block takes `items_per_block` of them per pass
// (its threads, or its warps for a warp-per-item kernel), at most `blocks_per_sm` per SM of
// the current device; at least 1.
unsigned grid_stride_blocks(uint64_t work_items, uint32_t items_per_block,
                            uint32_t blocks_per_sm = 8);

}  // namespace hsring::gpu
