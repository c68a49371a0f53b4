// The row-gather op: rows of a table picked by an index, as the embedding lookup of the
// target's forward, the KV cache's reordering (model/cuda_kv_cache.h) and the DFlash step's
// block rows (train/) use it; and its inverse, the scatter of rows to the places an index
// names. Plain host functions (no CUDA syntax: C++ sources call them); each launches on
// `stream` and returns the launch's error; none synchronises.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace hsring::gpu {

// y[r] = table[index[r]] ([rows, dim]), or zeros where index[r] < 0, into y (fp32), y_bf16
// (rounded as gpu/bf16.cuh's float_to_bf16), or both: rows gathered, or (by the inverse
// index) scattered back among zeros. The table's rows are table_stride elements apart (0:
// dim), so that it may be a column range of a wider array.
cudaError_t launch_gather_rows(const float* table, const int32_t* index, uint32_t rows,
                               uint32_t dim, float* y, cudaStream_t stream,
                               uint16_t* y_bf16 = nullptr, uint32_t table_stride = 0);
// The same from a bf16 table: its values exactly, in either output.
cudaError_t launch_gather_rows(const uint16_t* table, const int32_t* index, uint32_t rows,
                               uint32_t dim, float* y, cudaStream_t stream,
                               uint16_t* y_bf16 = nullptr, uint32_t table_stride = 0);

// dst[dst_rows[r]] = src[r] for bf16 rows [rows, width]. REQUIRES: width even, dst_rows
// distinct and in range.
cudaError_t launch_scatter_rows(const uint16_t* src, const int32_t* dst_rows, uint32_t rows,
                                uint32_t width, uint16_t* dst, cudaStream_t stream);

}  // namespace hsring::gpu
