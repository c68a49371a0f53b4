// The GPU kernels of the data path, behind plain host functions (no CUDA syntax here, so
// C++ sources call them): the synthetic forward's output, the drafter's verification and
// noise, and a sleep that tests use to delay a stream on purpose. Each launches on
// `stream` and returns the launch's error; none synchronises.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/dtype.h"

namespace hsring::gpu {

// What the verification kernel hands back: the only bytes that cross to the host.
struct VerifyVerdict {
  unsigned long long mismatches;  // elements that differ from the synthetic function
  unsigned long long first_bad;   // lowest flat index in [tokens, layers * hidden] that differs
};
inline constexpr unsigned long long kNoMismatch = ~0ull;

// Writes the synthetic hidden states of `batch_id` (synthetic_element_bits) for tokens
// [0, tokens) of `layers` layers: element (token t, dim d) of layer k goes to
// dst + k * layer_stride_bytes + (t * row_pitch + d) * elem_bytes. row_pitch 0 means
// `hidden` (K separate [tokens, hidden] arrays); layer_stride H*elem with row_pitch K*H
// writes the columns of one [tokens, K*H] array. This is what the synthetic target's
// forward captures.
cudaError_t launch_synthetic_layers(void* dst, uint64_t layer_stride_bytes, uint64_t batch_id,
                                    uint32_t layers, uint32_t tokens, uint32_t hidden,
                                    uint32_t elem_bytes, cudaStream_t stream,
                                    uint64_t row_pitch = 0);

// Compares an assembled [tokens, layers * hidden] batch with the synthetic function and
// writes the verdict to `verdict` (device memory; the launch resets it first).
cudaError_t launch_verify_assembled(const void* src, uint64_t batch_id, uint32_t layers,
                                    uint32_t tokens, uint32_t hidden, uint32_t elem_bytes,
                                    VerifyVerdict* verdict, cudaStream_t stream);

// Adds std * N(0, 1) to each of `elements` values in place; the noise of element i is
// gaussian4(seed, step, i / 4)[i % 4] (gpu/philox.h), computed in fp32 and rounded to
// nearest even into `dtype`.
cudaError_t launch_add_noise(void* data, uint64_t elements, DType dtype, float std, uint64_t seed,
                             uint64_t step, cudaStream_t stream);

// Writes the GPU's global nanosecond timer into `*dst` (pinned host or device memory)
// when `stream` reaches it: a benchmark's probe between two streams' work.
cudaError_t launch_timestamp(uint64_t* dst, cudaStream_t stream);

// Keeps `stream` busy for `microseconds` (one thread spinning on the global timer).
cudaError_t launch_gpu_sleep(uint32_t microseconds, cudaStream_t stream);

}  // namespace hsring::gpu
