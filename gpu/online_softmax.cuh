// The online softmax's step over one tile of keys (flash attention's running maximum and
// sum), for the attention kernels whose threads hold the tensor cores' accumulator layout:
// the drafter's block attention (train/) and the target's causal attention (model/).
#pragma once

#include <cuda_runtime.h>

namespace hsring::gpu {

// One key tile for a thread's two rows (gid, gid + 8 of its warp's 16), in log2 units.
// tile_max: the thread's own maxima of the tile's scaled scores, made the rows' (over the
// quad of lanes that share them); m: the running maxima, raised to them; correction: what
// earlier sums and outputs are to be multiplied by (0 on the first tile, m being -inf),
// already applied to the thread's partial sums l.
__device__ inline void online_softmax_step(float (&tile_max)[2], float (&m)[2], float (&l)[2],
                                           float (&correction)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xFFFFFFFFu, tile_max[r], 1));
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xFFFFFFFFu, tile_max[r], 2));
    const float m_new = fmaxf(m[r], tile_max[r]);
    correction[r] = exp2f(m[r] - m_new);
    m[r] = m_new;
    l[r] *= correction[r];  // the lane's partial sum; the quad's are added at the end
  }
}

}  // namespace hsring::gpu
