// The SwiGLU kernels (gpu/ops/swiglu.h): bandwidth-bound, four values a thread where the
// arrays allow it.
#include <cuda_runtime.h>

#include "gpu/bf16.cuh"
#include "gpu/grid_stride.cuh"
#include "gpu/launch_grid.h"
#include "gpu/ops/swiglu.h"

namespace hsring::gpu {

namespace {

constexpr int kThreads = 256;

// 16 blocks per SM: the training step is 2% slower with 8 (drafter_step_bench, bench/RESULTS.md).
unsigned grid_for(uint64_t work_items) { return grid_stride_blocks(work_items, kThreads, 16); }

__device__ __forceinline__ float sigmoid_fast(float g) { return 1.0f / (1.0f + __expf(-g)); }

template <SiluPrecision kPrecision>
__device__ __forceinline__ float silu_times(float g, float u) {
  if constexpr (kPrecision == SiluPrecision::kFast)
    return g * sigmoid_fast(g) * u;
  else
    return g / (1.0f + expf(-g)) * u;
}

// d(silu(g) u)/dg and /du times d: silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
__device__ __forceinline__ float2 silu_times_backward(float g, float u, float d) {
  const float sig = sigmoid_fast(g);
  return {d * u * sig * (1.0f + g * (1.0f - sig)), d * g * sig};
}

// Output value i of `cols` a row reads its inputs at (i / cols) * stride + i % cols: stride
// == cols for separate gate and up arrays, 2 cols for the fused projection's rows. Inputs T:
// float, or uint16_t holding bf16.
// The division per quad stays: a row-by-row grid without it ran 5 % slower in the forward's
// shapes (bench/RESULTS.md, "Where the forward's time goes").
template <SiluPrecision kPrecision, class T>
__global__ void swiglu_forward_kernel(const T* __restrict__ gate, const T* __restrict__ up,
                                      uint64_t rows, uint64_t cols, uint64_t stride,
                                      float* __restrict__ out, uint16_t* __restrict__ out_bf16) {
  const bool packed = stride == cols;
  const auto at = [&](uint64_t i) {
    if (packed) return i;
    const uint64_t r = i / cols;
    return r * stride + (i - r * cols);
  };
  const bool aligned =
      (packed || (cols % 4 == 0 && stride % 4 == 0)) && four_aligned(gate, up, out, out_bf16);
  quads_then_rest(
      rows * cols, aligned,
      [&](uint64_t q) {
        const uint64_t i = at(4 * q);
        const float4 g = load4(gate + i, 0), u = load4(up + i, 0);
        store4(out, out_bf16, q,
               {silu_times<kPrecision>(g.x, u.x), silu_times<kPrecision>(g.y, u.y),
                silu_times<kPrecision>(g.z, u.z), silu_times<kPrecision>(g.w, u.w)});
      },
      [&](uint64_t i) {
        const uint64_t j = at(i);
        store(out, out_bf16, i, silu_times<kPrecision>(load(gate, j), load(up, j)));
      });
}

template <class T>
__global__ void swiglu_backward_kernel(const T* __restrict__ gate, const T* __restrict__ up,
                                       const T* __restrict__ dout, uint64_t n,
                                       float* __restrict__ dgate, float* __restrict__ dup,
                                       uint16_t* __restrict__ dgate_bf16,
                                       uint16_t* __restrict__ dup_bf16) {
  quads_then_rest(
      n, four_aligned(gate, up, dout, dgate, dup, dgate_bf16, dup_bf16),
      [&](uint64_t q) {
        const float4 g = load4(gate, q), u = load4(up, q), d = load4(dout, q);
        const float2 x = silu_times_backward(g.x, u.x, d.x), y = silu_times_backward(g.y, u.y, d.y),
                     z = silu_times_backward(g.z, u.z, d.z), w = silu_times_backward(g.w, u.w, d.w);
        store4(dgate, dgate_bf16, q, {x.x, y.x, z.x, w.x});
        store4(dup, dup_bf16, q, {x.y, y.y, z.y, w.y});
      },
      [&](uint64_t i) {
        const float2 grads = silu_times_backward(load(gate, i), load(up, i), load(dout, i));
        store(dgate, dgate_bf16, i, grads.x);
        store(dup, dup_bf16, i, grads.y);
      });
}

template <class T>
cudaError_t swiglu_forward(const T* gate, const T* up, uint64_t rows, uint64_t cols,
                           uint64_t stride, float* out, uint16_t* out_bf16, SiluPrecision precision,
                           cudaStream_t stream) {
  const uint64_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  if (precision == SiluPrecision::kRounded)
    swiglu_forward_kernel<SiluPrecision::kRounded>
        <<<grid_for(n / 4 + 1), kThreads, 0, stream>>>(gate, up, rows, cols, stride, out, out_bf16);
  else
    swiglu_forward_kernel<SiluPrecision::kFast>
        <<<grid_for(n / 4 + 1), kThreads, 0, stream>>>(gate, up, rows, cols, stride, out, out_bf16);
  return cudaGetLastError();
}

template <class T>
cudaError_t swiglu_backward(const T* gate, const T* up, const T* dout, size_t n, float* dgate,
                            float* dup, cudaStream_t stream, uint16_t* dgate_bf16,
                            uint16_t* dup_bf16) {
  swiglu_backward_kernel<<<grid_for(n / 4 + 1), kThreads, 0, stream>>>(gate, up, dout, n, dgate,
                                                                       dup, dgate_bf16, dup_bf16);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_swiglu_forward(const float* gate, const float* up, size_t n, float* out,
                                  cudaStream_t stream, uint16_t* out_bf16,
                                  SiluPrecision precision) {
  return swiglu_forward(gate, up, 1, n, n, out, out_bf16, precision, stream);
}
cudaError_t launch_swiglu_forward(const uint16_t* gate, const uint16_t* up, size_t n, float* out,
                                  cudaStream_t stream, uint16_t* out_bf16,
                                  SiluPrecision precision) {
  return swiglu_forward(gate, up, 1, n, n, out, out_bf16, precision, stream);
}

cudaError_t launch_swiglu_forward_fused(const uint16_t* gate_up, uint32_t rows, uint32_t inter,
                                        float* out, cudaStream_t stream, uint16_t* out_bf16,
                                        SiluPrecision precision) {
  return swiglu_forward(gate_up, gate_up + inter, rows, inter, 2 * uint64_t(inter), out, out_bf16,
                        precision, stream);
}

cudaError_t launch_swiglu_backward(const float* gate, const float* up, const float* dout, size_t n,
                                   float* dgate, float* dup, cudaStream_t stream,
                                   uint16_t* dgate_bf16, uint16_t* dup_bf16) {
  return swiglu_backward(gate, up, dout, n, dgate, dup, stream, dgate_bf16, dup_bf16);
}
cudaError_t launch_swiglu_backward(const uint16_t* gate, const uint16_t* up, const uint16_t* dout,
                                   size_t n, float* dgate, float* dup, cudaStream_t stream,
                                   uint16_t* dgate_bf16, uint16_t* dup_bf16) {
  return swiglu_backward(gate, up, dout, n, dgate, dup, stream, dgate_bf16, dup_bf16);
}

}  // namespace hsring::gpu
