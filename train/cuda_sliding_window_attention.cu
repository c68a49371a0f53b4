// The same-position drafter's sliding-window attention on the GPU, forward and backward. One warp
// per (row, head): lane l holds elements l, l + 32, ... of the head (coalesced loads), a dot
// product is a warp sum, and the softmax is online (running max and sum), so nothing of
// size rows x window is ever stored. The backward recomputes probabilities from the
// forward's log-sum-exp: dq per query row, then dk and dv per key row over the queries
// that see it, so no two warps write the same element (no atomics).
#include <cuda_runtime.h>

#include "gpu/block_reduce.cuh"
#include "gpu/launch_grid.h"
#include "train/cuda_drafter_kernels.h"

namespace hsring::train {

namespace {

using gpu::warp_sum;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr uint32_t kMaxPerLane = 8;  // head_dim up to 256

// The kernels' copy of ops::AttentionShape, in 32 bits (rows and heads index registers), with
// window 0 (the whole document) made explicit.
struct AttentionDims {
  uint32_t rows = 0, heads = 0, kv_heads = 0, head_dim = 0, window = 0;
};

// False when a count does not fit 32 bits, heads is not a multiple of kv_heads, or the
// head_dim is not one the kernels take.
bool to_dims(const ops::AttentionShape& s, AttentionDims& d) {
  constexpr size_t kMax = UINT32_MAX;
  if (s.rows > kMax || s.heads > kMax || s.window > kMax) return false;
  if (s.kv_heads == 0 || s.heads % s.kv_heads != 0) return false;
  if (s.head_dim > kMax || !attention_head_dim_supported(uint32_t(s.head_dim))) return false;
  d = {uint32_t(s.rows), uint32_t(s.heads), uint32_t(s.kv_heads), uint32_t(s.head_dim),
       uint32_t(s.window ? s.window : s.rows)};
  return true;
}

// The first key row query t attends to (train/layers.cc has the same rule).
__device__ uint32_t first_key(uint32_t t, uint32_t doc_start, uint32_t window) {
  return t + 1 >= window ? max(doc_start, t + 1 - window) : doc_start;
}

// One past the last query row that attends to key j.
__device__ uint32_t last_query_end(uint32_t j, uint32_t doc_end, uint32_t window) {
  return doc_end - j <= window ? doc_end : j + window;
}

template <int P>
__device__ void load_head(const float* __restrict__ src, uint32_t lane, float (&dst)[P],
                          float scale = 1.0f) {
#pragma unroll
  for (int p = 0; p < P; ++p) dst[p] = src[lane + 32 * p] * scale;
}

template <int P>
__device__ float dot_head(const float (&a)[P], const float* __restrict__ b, uint32_t lane) {
  float sum = 0;
#pragma unroll
  for (int p = 0; p < P; ++p) sum += a[p] * b[lane + 32 * p];
  return warp_sum(sum);
}

// Warps stride over the items (one per row and head) of a grid-stride loop.
__device__ uint64_t first_item() { return uint64_t(blockIdx.x) * kWarps + threadIdx.x / 32; }
__device__ uint64_t item_stride() { return uint64_t(gridDim.x) * kWarps; }

// A query-side item (row t, query head h): t, and where h's key/value head starts in a row.
struct QueryItem {
  uint32_t t;
  uint64_t kv_offset;
};
__device__ QueryItem query_item(uint64_t item, const AttentionDims& d, uint32_t head_dim) {
  const auto t = uint32_t(item / d.heads);
  const uint32_t h = uint32_t(item - uint64_t(t) * d.heads);
  return {t, uint64_t(h / (d.heads / d.kv_heads)) * head_dim};
}

template <int P>
__global__ void forward_kernel(const float* __restrict__ q, const float* __restrict__ k,
                               const float* __restrict__ v, const int32_t* __restrict__ doc_start,
                               AttentionDims d, float* __restrict__ out, float* __restrict__ lse) {
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t hd = 32 * P;
  const float scale = rsqrtf(float(hd));
  const uint64_t items = uint64_t(d.rows) * d.heads;
  for (uint64_t item = first_item(); item < items; item += item_stride()) {
    const auto [t, kv_offset] = query_item(item, d, hd);
    float qh[P];
    load_head<P>(q + item * hd, lane, qh, scale);
    float running_max = -INFINITY, total = 0, acc[P] = {};
    for (uint32_t j = first_key(t, uint32_t(doc_start[t]), d.window); j <= t; ++j) {
      const uint64_t kv_row = uint64_t(j) * d.kv_heads * hd + kv_offset;
      const float s = dot_head<P>(qh, k + kv_row, lane);
      const float new_max = fmaxf(running_max, s);
      const float correction = __expf(running_max - new_max);
      const float p = __expf(s - new_max);
      total = total * correction + p;
#pragma unroll
      for (int e = 0; e < P; ++e) acc[e] = acc[e] * correction + p * v[kv_row + lane + 32 * e];
      running_max = new_max;
    }
#pragma unroll
    for (int e = 0; e < P; ++e) out[item * hd + lane + 32 * e] = acc[e] / total;
    if (lane == 0) lse[item] = running_max + logf(total);
  }
}

// dq = scale * sum_j p_j (dout . v_j - delta) k_j, with delta = dout . out (stored for the
// key-side kernel).
template <int P>
__global__ void backward_query_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                      const float* __restrict__ v, const float* __restrict__ out,
                                      const float* __restrict__ dout, const float* __restrict__ lse,
                                      const int32_t* __restrict__ doc_start, AttentionDims d,
                                      float* __restrict__ delta, float* __restrict__ dq) {
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t hd = 32 * P;
  const float scale = rsqrtf(float(hd));
  const uint64_t items = uint64_t(d.rows) * d.heads;
  for (uint64_t item = first_item(); item < items; item += item_stride()) {
    const auto [t, kv_offset] = query_item(item, d, hd);
    float qh[P], doh[P], acc[P] = {};
    load_head<P>(q + item * hd, lane, qh, scale);
    load_head<P>(dout + item * hd, lane, doh);
    const float dl = dot_head<P>(doh, out + item * hd, lane);
    if (lane == 0) delta[item] = dl;
    const float l = lse[item];
    for (uint32_t j = first_key(t, uint32_t(doc_start[t]), d.window); j <= t; ++j) {
      const uint64_t kv_row = uint64_t(j) * d.kv_heads * hd + kv_offset;
      const float p = __expf(dot_head<P>(qh, k + kv_row, lane) - l);
      const float ds = p * (dot_head<P>(doh, v + kv_row, lane) - dl);
#pragma unroll
      for (int e = 0; e < P; ++e) acc[e] += ds * k[kv_row + lane + 32 * e];
    }
#pragma unroll
    for (int e = 0; e < P; ++e) dq[item * hd + lane + 32 * e] = acc[e] * scale;
  }
}

// dv_j = sum p dout, dk_j = scale * sum p (dout . v_j - delta) q over the queries (and the
// query heads of the group) that see key j.
template <int P>
__global__ void backward_key_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                    const float* __restrict__ v, const float* __restrict__ dout,
                                    const float* __restrict__ lse, const float* __restrict__ delta,
                                    const int32_t* __restrict__ doc_end, AttentionDims d,
                                    float* __restrict__ dk, float* __restrict__ dv) {
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t hd = 32 * P, group = d.heads / d.kv_heads;
  const float scale = rsqrtf(float(hd));
  const uint64_t items = uint64_t(d.rows) * d.kv_heads;
  for (uint64_t item = first_item(); item < items; item += item_stride()) {
    const auto j = uint32_t(item / d.kv_heads);
    const uint32_t g = uint32_t(item - uint64_t(j) * d.kv_heads);
    float kj[P], vj[P], acc_k[P] = {}, acc_v[P] = {};
    load_head<P>(k + item * hd, lane, kj, scale);  // scaled: q . kj is the score
    load_head<P>(v + item * hd, lane, vj);
    const uint32_t end = last_query_end(j, uint32_t(doc_end[j]), d.window);
    for (uint32_t t = j; t < end; ++t) {
      for (uint32_t h = g * group; h < (g + 1) * group; ++h) {
        const uint64_t qi = uint64_t(t) * d.heads + h;
        const float* qh = q + qi * hd;
        const float* doh = dout + qi * hd;
        const float p = __expf(dot_head<P>(kj, qh, lane) - lse[qi]);
        const float ds = p * (dot_head<P>(vj, doh, lane) - delta[qi]);
#pragma unroll
        for (int e = 0; e < P; ++e) {
          acc_k[e] += ds * qh[lane + 32 * e];
          acc_v[e] += p * doh[lane + 32 * e];
        }
      }
    }
#pragma unroll
    for (int e = 0; e < P; ++e) {
      dk[item * hd + lane + 32 * e] = acc_k[e] * scale;
      dv[item * hd + lane + 32 * e] = acc_v[e];
    }
  }
}

// One warp per item; 32 blocks per SM: items near a document's start see fewer keys, and
// spare blocks even out the warps' work (8 per SM here and in the element-wise kernels
// made the step 2% slower).
unsigned warp_grid(uint64_t items) { return gpu::grid_stride_blocks(items, kWarps, 32); }

struct ForwardArgs {
  const float *q, *k, *v;
  const int32_t* doc_start;
  AttentionDims dims;
  float *out, *lse;
};

struct BackwardArgs {
  const float *q, *k, *v, *out, *dout, *lse;
  const int32_t *doc_start, *doc_end;
  AttentionDims dims;
  float *delta, *dq, *dk, *dv;
};

template <int P>
void run_forward(const ForwardArgs& a, cudaStream_t stream) {
  forward_kernel<P><<<warp_grid(uint64_t(a.dims.rows) * a.dims.heads), kThreads, 0, stream>>>(
      a.q, a.k, a.v, a.doc_start, a.dims, a.out, a.lse);
}

template <int P>
void run_backward(const BackwardArgs& a, cudaStream_t stream) {
  const AttentionDims& d = a.dims;
  backward_query_kernel<P><<<warp_grid(uint64_t(d.rows) * d.heads), kThreads, 0, stream>>>(
      a.q, a.k, a.v, a.out, a.dout, a.lse, a.doc_start, d, a.delta, a.dq);
  backward_key_kernel<P><<<warp_grid(uint64_t(d.rows) * d.kv_heads), kThreads, 0, stream>>>(
      a.q, a.k, a.v, a.dout, a.lse, a.delta, a.doc_end, d, a.dk, a.dv);
}

// Indexed by head_dim / 32.
constexpr void (*kForward[])(const ForwardArgs&, cudaStream_t) = {
    nullptr,        run_forward<1>, run_forward<2>, run_forward<3>, run_forward<4>,
    run_forward<5>, run_forward<6>, run_forward<7>, run_forward<8>};
constexpr void (*kBackward[])(const BackwardArgs&, cudaStream_t) = {
    nullptr,         run_backward<1>, run_backward<2>, run_backward<3>, run_backward<4>,
    run_backward<5>, run_backward<6>, run_backward<7>, run_backward<8>};
static_assert(sizeof(kForward) / sizeof(kForward[0]) == kMaxPerLane + 1);

}  // namespace

bool attention_head_dim_supported(uint32_t head_dim) {
  return head_dim > 0 && head_dim % 32 == 0 && head_dim <= 32 * kMaxPerLane;
}

cudaError_t launch_attention_forward(const float* q, const float* k, const float* v,
                                     const int32_t* doc_start, const ops::AttentionShape& shape,
                                     float* out, float* lse, cudaStream_t stream) {
  AttentionDims dims;
  if (!to_dims(shape, dims)) return cudaErrorInvalidValue;
  kForward[dims.head_dim / 32](ForwardArgs{q, k, v, doc_start, dims, out, lse}, stream);
  return cudaGetLastError();
}

cudaError_t launch_attention_backward(const float* q, const float* k, const float* v,
                                      const float* out, const float* dout, const float* lse,
                                      const int32_t* doc_start, const int32_t* doc_end,
                                      const ops::AttentionShape& shape, float* delta, float* dq,
                                      float* dk, float* dv, cudaStream_t stream) {
  AttentionDims dims;
  if (!to_dims(shape, dims)) return cudaErrorInvalidValue;
  kBackward[dims.head_dim / 32](
      BackwardArgs{q, k, v, out, dout, lse, doc_start, doc_end, dims, delta, dq, dk, dv}, stream);
  return cudaGetLastError();
}

}  // namespace hsring::train
