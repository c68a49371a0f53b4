// The mixture-of-experts kernels of the CUDA forward (model/cuda_moe.h). The grouped GEMM is
// a plain tiled bf16 tensor-core product (mma.sync m16n8k16 with ldmatrix, a three-stage
// cp.async pipeline) whose block reads its expert and its rows from the tile list, so the
// host never learns how many tokens an expert got.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "gpu/bf16.cuh"
#include "gpu/block_reduce.cuh"
#include "gpu/cp_async.cuh"
#include "gpu/launch_grid.h"
#include "gpu/mma.cuh"
#include "model/cuda_moe.h"

namespace hsring {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__global__ void rms_norm_split_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                                      uint32_t rows, uint32_t dim, float eps, Bf16* __restrict__ hi,
                                      Bf16* __restrict__ lo) {
  __shared__ float partials[kWarps];
  for (uint32_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + uint64_t(row) * dim;
    float squares = 0;
    for (uint32_t i = threadIdx.x; i < dim; i += kThreads) squares += xr[i] * xr[i];
    const float scale = 1.0f / sqrtf(gpu::block_sum<kWarps>(squares, partials) / float(dim) + eps);
    for (uint32_t i = threadIdx.x; i < dim; i += kThreads) {
      const float n = xr[i] * scale * weight[i];
      const Bf16 h = gpu::float_to_bf16(n);
      hi[uint64_t(row) * dim + i] = h;
      lo[uint64_t(row) * dim + i] = gpu::float_to_bf16(n - gpu::bf16_to_float(h));  // exact
    }
  }
}

__global__ void route_kernel(float* logits, uint32_t rows, uint64_t stride, uint32_t experts,
                             uint32_t top_k, bool normalise, ExpertChoice* choices) {
  const uint32_t r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  route_token(logits + r * stride, experts, top_k, normalise, choices + uint64_t(r) * top_k);
}

// Per chunk of kGroupChunk slots: how many chose each expert. The shared-memory atomics
// only count, so the counts do not depend on their order.
__global__ void group_count_kernel(const ExpertChoice* choices, uint32_t slots, uint32_t experts,
                                   int32_t* chunk_counts) {
  extern __shared__ int32_t histogram[];
  for (uint32_t e = threadIdx.x; e < experts; e += blockDim.x) histogram[e] = 0;
  __syncthreads();
  const uint32_t s = blockIdx.x * kGroupChunk + threadIdx.x;
  if (s < slots) atomicAdd(&histogram[choices[s].expert], 1);
  __syncthreads();
  for (uint32_t e = threadIdx.x; e < experts; e += blockDim.x)
    chunk_counts[uint64_t(blockIdx.x) * experts + e] = histogram[e];
}

constexpr int kScanThreads = 1024;

// One block: each expert's count and, in chunk_counts, the rows of that expert in the
// chunks before each chunk; then the experts' first rows (a scan in expert order) and the
// tile list.
__global__ void __launch_bounds__(kScanThreads)
    group_scan_kernel(int32_t* chunk_counts, uint32_t chunks, uint32_t experts, uint32_t slots,
                      int32_t* expert_begin, ExpertTile* tiles, uint32_t max_tiles) {
  __shared__ int32_t row_sums[kScanThreads], tile_sums[kScanThreads];
  __shared__ int32_t tile_total;
  const uint32_t per = (experts + kScanThreads - 1) / kScanThreads;
  const uint32_t e0 = threadIdx.x * per;
  const uint32_t e1 = min(e0 + per, experts);
  int32_t rows = 0, tile_count = 0;
  for (uint32_t e = e0; e < e1; ++e) {
    // Sixteen loads in flight at a time: the chunks' counts are far apart in memory.
    constexpr uint32_t kBatch = 16;
    int32_t run = 0;
    for (uint32_t c = 0; c < chunks; c += kBatch) {
      int32_t n[kBatch];
#pragma unroll
      for (uint32_t j = 0; j < kBatch; ++j)
        n[j] = c + j < chunks ? chunk_counts[uint64_t(c + j) * experts + e] : 0;
#pragma unroll
      for (uint32_t j = 0; j < kBatch; ++j)
        if (c + j < chunks) {
          chunk_counts[uint64_t(c + j) * experts + e] = run;
          run += n[j];
        }
    }
    expert_begin[e] = run;  // the count for now; its first row below
    rows += run;
    tile_count += (run + int32_t(kExpertRowTile) - 1) / int32_t(kExpertRowTile);
  }
  row_sums[threadIdx.x] = rows;
  tile_sums[threadIdx.x] = tile_count;
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t row = 0, tile = 0;
    for (int i = 0; i < kScanThreads; ++i) {
      const int32_t r = row_sums[i], t = tile_sums[i];
      row_sums[i] = row;
      tile_sums[i] = tile;
      row += r;
      tile += t;
    }
    tile_total = tile;
    expert_begin[experts] = int32_t(slots);
  }
  __syncthreads();
  int32_t row = row_sums[threadIdx.x], tile = tile_sums[threadIdx.x];
  for (uint32_t e = e0; e < e1; ++e) {
    const int32_t n = expert_begin[e];
    expert_begin[e] = row;
    for (int32_t r = 0; r < n; r += int32_t(kExpertRowTile))
      tiles[tile++] = {int32_t(e), row + r, row + min(r + int32_t(kExpertRowTile), n), 0};
    row += n;
  }
  for (uint32_t i = uint32_t(tile_total) + threadIdx.x; i < max_tiles; i += kScanThreads)
    tiles[i] = {-1, 0, 0, 0};
}

// Each slot's place: its expert's first row, the rows of that expert in earlier chunks, and
// the slots of that expert before it in its own chunk (a stable sort).
__global__ void group_scatter_kernel(const ExpertChoice* choices, uint32_t slots, uint32_t top_k,
                                     uint32_t experts, const int32_t* chunk_counts,
                                     const int32_t* expert_begin, int32_t* slot_row,
                                     int32_t* row_token) {
  __shared__ int32_t chosen[kGroupChunk];
  const uint32_t s = blockIdx.x * kGroupChunk + threadIdx.x;
  const int32_t e = s < slots ? int32_t(choices[s].expert) : -1;
  chosen[threadIdx.x] = e;
  __syncthreads();
  if (s >= slots) return;
  int32_t rank = 0;
  for (uint32_t j = 0; j < threadIdx.x; ++j) rank += chosen[j] == e;
  const int32_t row =
      expert_begin[e] + chunk_counts[uint64_t(blockIdx.x) * experts + uint32_t(e)] + rank;
  slot_row[s] = row;
  row_token[row] = int32_t(s / top_k);
}

// The grouped GEMM: a block computes kBm x kBn outputs of one tile, 8 warps as 2 x 4, each
// 64 x 32 (4 x 4 mma tiles).
constexpr int kBm = int(kExpertRowTile), kBn = 128, kBk = 32, kStages = 3;
constexpr int kGemmThreads = 256;
constexpr int kSk = kBk + 8;  // padded rows: ldmatrix's 8 row addresses hit distinct banks
constexpr int kGemmSmem = kStages * (kBm + kBn) * kSk * int(sizeof(Bf16));

template <bool kFp32Out>
__global__ void __launch_bounds__(kGemmThreads)
    grouped_linear_kernel(GroupedProduct p, const ExpertTile* __restrict__ tiles) {
  const ExpertTile tile = tiles[blockIdx.y];
  if (tile.expert < 0) return;
  extern __shared__ __align__(16) unsigned char smem[];
  Bf16* sa = reinterpret_cast<Bf16*>(smem);  // [kStages][kBm][kSk]
  Bf16* sb = sa + kStages * kBm * kSk;       // [kStages][kBn][kSk]
  const int n0 = int(blockIdx.x) * kBn;
  const Bf16* w = p.w + uint64_t(tile.expert) * p.w_stride;
  const int tid = int(threadIdx.x);

  // Each thread copies two 16-byte pieces of A and two of B per stage: piece c covers row
  // c / 4, columns (c % 4) * 8 .. + 8 of the stage's kBk columns.
  const Bf16* a_src[2];
  const Bf16* b_src[2];
  bool a_ok[2], b_ok[2];
  int offset[2], col[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int c = tid + i * kGemmThreads;
    const int r = c >> 2;
    col[i] = (c & 3) * 8;
    offset[i] = r * kSk + col[i];
    const int row = tile.row_begin + r;
    a_ok[i] = row < tile.row_end;
    const int64_t from = a_ok[i] ? (p.x_rows ? p.x_rows[row] : row) : 0;
    a_src[i] = p.x + uint64_t(from) * p.ldx;
    b_ok[i] = n0 + r < int(p.out);
    b_src[i] = w + uint64_t(b_ok[i] ? n0 + r : 0) * p.in;
  }
  const int k_tiles = int((p.in + kBk - 1) / kBk);
  auto load = [&](int stage, int kt) {
    const int k0 = kt * kBk;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const bool k_in = k0 + col[i] < int(p.in);  // in % 8 == 0: a piece is all in or out
      const int at = k_in ? k0 + col[i] : 0;
      gpu::cp_async16(sa + stage * kBm * kSk + offset[i], a_src[i] + at, a_ok[i] && k_in);
      gpu::cp_async16(sb + stage * kBn * kSk + offset[i], b_src[i] + at, b_ok[i] && k_in);
    }
  };

  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3;
  float acc[4][4][4] = {};
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load(s, s);
    gpu::cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    gpu::cp_async_wait<kStages - 2>();
    __syncthreads();  // stage kt is in; stage kt - 1 is no longer read by anyone
    const int next = kt + kStages - 1;
    if (next < k_tiles) load(next % kStages, next);
    gpu::cp_async_commit();
    const Bf16* a = sa + (kt % kStages) * kBm * kSk;
    const Bf16* b = sb + (kt % kStages) * kBn * kSk;
#pragma unroll
    for (int ks = 0; ks < kBk / 16; ++ks) {
      uint32_t af[4][4], bf[2][4];
#pragma unroll
      for (int mt = 0; mt < 4; ++mt)
        gpu::ldmatrix_x4(af[mt],
                         a + (wm * 64 + mt * 16 + (lane & 15)) * kSk + ks * 16 + (lane >> 4) * 8);
        // Lanes 0-7: n 0-7 at k 0; 8-15: n 0-7 at k 8; 16-23: n 8-15 at k 0; 24-31: n 8-15 at
        // k 8, so bf[np] holds (b0, b1) of n tile 2 np, then of n tile 2 np + 1.
#pragma unroll
      for (int np = 0; np < 2; ++np)
        gpu::ldmatrix_x4(bf[np], b + (wn * 32 + np * 16 + (lane >> 4) * 8 + (lane & 7)) * kSk +
                                     ks * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
      for (int mt = 0; mt < 4; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
          gpu::mma_bf16_16816(acc[mt][nt], af[mt], bf[nt >> 1][(nt & 1) * 2],
                              bf[nt >> 1][(nt & 1) * 2 + 1]);
    }
  }
  gpu::cp_async_wait<0>();

  // Lane 4 g + t holds rows g and g + 8, columns 2 t and 2 t + 1 of each mma tile.
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < 4; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = tile.row_begin + wm * 64 + mt * 16 + g + half * 8;
      if (row >= tile.row_end) continue;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int c = n0 + wn * 32 + nt * 8 + 2 * t;
        if (c >= int(p.out)) continue;  // out is even: c + 1 is in too
        const float v0 = acc[mt][nt][2 * half], v1 = acc[mt][nt][2 * half + 1];
        if constexpr (kFp32Out) {
          *reinterpret_cast<float2*>(static_cast<float*>(p.y) + uint64_t(row) * p.ldy + c) =
              make_float2(v0, v1);
        } else {
          const __nv_bfloat162 pair = __floats2bfloat162_rn(v0, v1);
          *reinterpret_cast<__nv_bfloat162*>(static_cast<Bf16*>(p.y) + uint64_t(row) * p.ldy + c) =
              pair;
        }
      }
    }
}

__global__ void moe_combine_kernel(const float* __restrict__ y,
                                   const ExpertChoice* __restrict__ choices,
                                   const int32_t* __restrict__ slot_row, uint32_t rows,
                                   uint32_t top_k, uint32_t hidden,
                                   const float* __restrict__ shared,
                                   const float* __restrict__ gate_logits, uint64_t gate_stride,
                                   float* __restrict__ residual) {
  const uint64_t total = uint64_t(rows) * hidden;
  for (uint64_t e = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t t = e / hidden;
    const uint64_t i = e - t * hidden;
    // Explicit roundings: no fused multiply-add, as the CPU forward sums.
    float sum = 0;
    for (uint32_t k = 0; k < top_k; ++k) {
      const uint64_t s = t * top_k + k;
      sum = __fadd_rn(sum, __fmul_rn(choices[s].weight, y[uint64_t(slot_row[s]) * hidden + i]));
    }
    if (shared) {
      const float gate = 1.0f / (1.0f + expf(-gate_logits[t * gate_stride]));
      sum = __fadd_rn(sum, __fmul_rn(gate, shared[e]));
    }
    residual[e] += sum;
  }
}

}  // namespace

cudaError_t launch_rms_norm_split(const float* x, const float* weight, uint32_t rows, uint32_t dim,
                                  float eps, Bf16* hi, Bf16* lo, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const unsigned grid = rows < 65535u * 8 ? rows : 65535u * 8;
  rms_norm_split_kernel<<<grid, kThreads, 0, stream>>>(x, weight, rows, dim, eps, hi, lo);
  return cudaGetLastError();
}

cudaError_t launch_route(float* logits, uint32_t rows, uint64_t stride, uint32_t experts,
                         uint32_t top_k, bool normalise, ExpertChoice* choices,
                         cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  constexpr unsigned kRouteThreads = 128;
  route_kernel<<<(rows + kRouteThreads - 1) / kRouteThreads, kRouteThreads, 0, stream>>>(
      logits, rows, stride, experts, top_k, normalise, choices);
  return cudaGetLastError();
}

cudaError_t launch_group_by_expert(const ExpertChoice* choices, uint32_t slots, uint32_t top_k,
                                   uint32_t experts, const ExpertGroups& groups,
                                   cudaStream_t stream) {
  if (slots == 0) return cudaSuccess;
  const uint32_t chunks = group_chunks(slots);
  group_count_kernel<<<chunks, kGroupChunk, experts * sizeof(int32_t), stream>>>(
      choices, slots, experts, groups.chunk_counts);
  group_scan_kernel<<<1, kScanThreads, 0, stream>>>(groups.chunk_counts, chunks, experts, slots,
                                                    groups.expert_begin, groups.tiles,
                                                    max_expert_tiles(slots, experts));
  group_scatter_kernel<<<chunks, kGroupChunk, 0, stream>>>(choices, slots, top_k, experts,
                                                           groups.chunk_counts, groups.expert_begin,
                                                           groups.slot_row, groups.row_token);
  return cudaGetLastError();
}

cudaError_t launch_grouped_linear(const GroupedProduct& product, const ExpertTile* tiles,
                                  uint32_t max_tiles, cudaStream_t stream) {
  if (max_tiles == 0 || product.out == 0) return cudaSuccess;
  const dim3 grid((product.out + kBn - 1) / kBn, max_tiles);
  if (product.y_fp32) {
    cudaError_t err = cudaFuncSetAttribute(grouped_linear_kernel<true>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, kGemmSmem);
    if (err != cudaSuccess) return err;
    grouped_linear_kernel<true><<<grid, kGemmThreads, kGemmSmem, stream>>>(product, tiles);
  } else {
    cudaError_t err = cudaFuncSetAttribute(grouped_linear_kernel<false>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, kGemmSmem);
    if (err != cudaSuccess) return err;
    grouped_linear_kernel<false><<<grid, kGemmThreads, kGemmSmem, stream>>>(product, tiles);
  }
  return cudaGetLastError();
}

cudaError_t launch_moe_combine(const float* y, const ExpertChoice* choices, const int32_t* slot_row,
                               uint32_t rows, uint32_t top_k, uint32_t hidden, const float* shared,
                               const float* gate_logits, uint64_t gate_stride, float* residual,
                               cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  moe_combine_kernel<<<gpu::grid_stride_blocks(uint64_t(rows) * hidden, kThreads), kThreads, 0,
                       stream>>>(y, choices, slot_row, rows, top_k, hidden, shared, gate_logits,
                                 gate_stride, residual);
  return cudaGetLastError();
}

}  // namespace hsring
