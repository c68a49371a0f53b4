// The embedding op, forward and backward, for fp32 tables (the training step's): the lookup
// added to y, and its gradient added back to the table's rows. The target's lookup from its
// bf16 table, written rather than added, is launch_gather_rows (gpu/ops/gather_rows.h). Plain
// host functions (no CUDA syntax: C++ sources call them); each launches on `stream` and
// returns the launch's error; none synchronises.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace hsring::gpu {

// y[r] += table[tokens[r]] ([rows, dim]).
cudaError_t launch_embedding_forward(const float* table, const int32_t* tokens, uint32_t rows,
                                     uint32_t dim, float* y, cudaStream_t stream);

// dtable[tokens[r]] += dy[r] (atomics: rows that share a token add in any order).
cudaError_t launch_embedding_backward(const int32_t* tokens, const float* dy, uint32_t rows,
                                      uint32_t dim, float* dtable, cudaStream_t stream);

}  // namespace hsring::gpu
