// How many blocks a grid-stride kernel gets: enough to fill the current device several
// times over (8 resident blocks per SM, the most a 256-thread block allows on sm_90) and no
// more; the kernel's loop strides over the rest.
#pragma once

#include <cstdint>

namespace hsring::gpu {

// Blocks for `work_items` items when one block takes `items_per_block` of them per pass
// (its threads, or its warps for a warp-per-item kernel); at least 1.
unsigned grid_stride_blocks(uint64_t work_items, uint32_t items_per_block);

}  // namespace hsring::gpu
