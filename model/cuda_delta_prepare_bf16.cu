// Pass 1 of the chunked gated delta rule for the bf16 pass 2 (launch_delta_rule; the
// algebra is in model/cuda_delta_net.h, pass 2 in model/cuda_delta_state_bf16.cu).
//
// One block of eight warps per (chunk, q/k head), taking the head's value heads in turn (they
// share q and k, so the gram products are made once). Every product is an mma.sync m16n8k16
// bf16 product with fp32 accumulation, its fragments read from bf16 shared memory with
// ldmatrix (rows 16 bytes apart modulo 128: the 8 rows one ldmatrix reads fall on different
// banks), as flash-linear-attention's kernels make theirs. q, k and v arrive in bf16, as the
// convolution wrote them; the system's right-hand side is their rows times beta (and gamma),
// rounded again. The element-wise work rides on
// the products' accumulators, whose layout is known, instead of passes over shared memory:
//   1. K K^T and Q K^T, the lower 16-row strips only, once per q/k head, their accumulators
//      kept in shared memory as each lane holds them; for each value head, the first masked
//      and decayed into
//      A_ij = beta_i exp(G_i - G_j) (k_i . k_j), j < i: the diagonal blocks in fp32 for step
//      2, the blocks left of them as bf16 operands for step 3; the second into
//      P_ij = exp(G_i - G_j) (q_i . k_j), j <= i, pass 2's bf16 operand, staged where K
//      was and stored in whole rows (the accumulators' layout writes half sectors).
//   2. The inverses of (I + A)'s four 16 x 16 diagonal blocks by forward substitution in
//      fp32, one thread per (block, column), the column in registers, rounded once to bf16.
//   3. W and U' without forming (I + A)^-1: X = (I + A)^-1 [diag(beta gamma) K |
//      diag(beta) V] by blocked forward substitution, X_i = T_ii (B_i - sum_{j<i} A_ij X_j),
//      each warp on its own 32 columns (columns are independent), X_i overwriting B_i in
//      shared memory once read; 40 products a warp in all. X is stored in whole rows.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "gpu/bf16.cuh"
#include "gpu/mma.cuh"
#include "model/cuda_delta_chunk.cuh"
#include "model/cuda_delta_rule_passes.h"

namespace hsring {

namespace {

constexpr int kChunk = int(kDeltaChunk);
constexpr int kTile = kDeltaBlock;
constexpr int kBlocks = kChunk / kTile;  // diagonal blocks of the chunk's system
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kWarpUnits = 2;  // 16-column units of X a warp solves for
// Row padding (bf16 values): rows 16 bytes apart modulo 128, so the 8 rows an ldmatrix reads
// fall on different banks.
constexpr int kPad = 8;
constexpr int kAStride = kChunk + kPad;  // A's blocks left of the diagonal, bf16
constexpr int kPStride = kChunk + kPad;  // P staged in K's place, bf16
constexpr int kTStride = kTile + kPad;   // the diagonal blocks' inverses, bf16
// The diagonal blocks of A in fp32: an odd stride puts the two blocks a warp's substitution
// reads at once on different banks.
constexpr int kDiagStride = kTile + 1;
constexpr int kStripTiles = 20;  // 16 x 8 tiles of a 64-row chunk's lower 16-row strips
constexpr int kJobsPerWarp = 2 * kStripTiles / kWarps;
static_assert(2 * kStripTiles % kWarps == 0, "the strips' tiles spread evenly over the warps");
constexpr int kGramFloats = kWarps * kJobsPerWarp * 32 * 4;

__host__ __device__ constexpr int round16(int n) { return (n + 15) / 16 * 16; }
__host__ __device__ constexpr int round32(int n) { return (n + 31) / 32 * 32; }

// Shared memory: fp32 first, the gram strips' accumulators, each lane's four in a row
// [kWarps][kJobsPerWarp][32][4]; A's diagonal blocks [kBlocks][kTile][kDiagStride]; then
// G and beta of each of the block's value heads [group][2][kChunk] (group = v_heads /
// qk_heads). Then bf16: K [kChunk][ld], then each value head's P [kChunk][kPStride] in
// its place (k_floor values: whichever is larger); Q, then V's part of B and X [kChunk][ld];
// K's part of B and X [kChunk][ld]; A [kChunk][kAStride]; the inverses
// [kBlocks][kTile][kTStride]. `width` columns of each row are held (the head dims rounded to
// 32 for the gram products' k steps), zero past the head dim.
struct Layout {
  int width, ld, k_floor, group;
  __host__ __device__ Layout(int dk, int dv, int value_heads_per_qk)
      : width(round32(dk > dv ? dk : dv)),
        ld(round32(dk > dv ? dk : dv) + kPad),
        k_floor(kChunk * (ld > kPStride ? ld : kPStride)),
        group(value_heads_per_qk) {}
  static constexpr int kFixedFloats = kGramFloats + kBlocks * kTile * kDiagStride;
  __host__ __device__ int floats() const { return kFixedFloats + 2 * kChunk * group; }
  __host__ __device__ size_t bytes() const {
    return size_t(floats()) * 4 + (size_t(k_floor) + size_t(2) * kChunk * ld +
                                   size_t(kChunk) * kAStride + size_t(kBlocks) * kTile * kTStride) *
                                      2;
  }
};
static_assert(Layout::kFixedFloats % 4 == 0 && 2 * kChunk % 4 == 0,
              "the bf16 arrays start 16-byte aligned");

// G (the chunk's cumulative sums of g) and beta of the block's `group` value heads from
// head h0 on, rows of the chunk from c0 (len of them; the rest: g 0, beta 0), into
// gates [group][2][kChunk] (a head's G, then its beta): read by every thread at once (a
// row's heads are adjacent), then each head's sums by one warp (chunk_running_sums, as
// load_chunk_gates). Ends with the block synchronised.
__device__ __forceinline__ void load_block_gates(const float* __restrict__ g,
                                                 const float* __restrict__ beta, int c0, int len,
                                                 int vh, int h0, int group, int tid, float* gates) {
  for (int e = tid; e < kChunk * group; e += kThreads) {
    const int r = e / group, hh = e % group;
    const uint64_t at = uint64_t(c0 + r) * vh + h0 + hh;
    gates[2 * hh * kChunk + r] = r < len ? g[at] : 0.0f;
    gates[(2 * hh + 1) * kChunk + r] = r < len ? beta[at] : 0.0f;
  }
  __syncthreads();
  const int lane = tid % 32;
  for (int hh = tid / 32; hh < group; hh += kWarps) {
    float* sums = gates + 2 * hh * kChunk;
    chunk_running_sums(sums[2 * lane], sums[2 * lane + 1], lane, sums);
  }
  __syncthreads();
}

// A load_rows that copies the values as they are.
struct Unscaled {};

// Two bf16 values times s, rounded again.
__device__ __forceinline__ uint32_t scale_pair(uint32_t pair, float s) {
  const float2 v = gpu::unpack_bf16(pair);
  return gpu::pack_bf16(s * v.x, s * v.y);
}

// Rows r < rows, columns c < columns of the bf16 rows at src (row stride `stride`) into dst
// [kChunk][ld], each row times scale(r) unless Scale is Unscaled; dst's other rows and its
// columns up to `width` zero. Eight values (16 bytes) a thread at a time (columns, the
// stride and src's rows 16-byte aligned), by `workers` threads of which this is `worker`.
template <class Scale>
__device__ __forceinline__ void load_rows(Bf16* dst, int ld, int width, const Bf16* src,
                                          uint64_t stride, int rows, int columns, int worker,
                                          int workers, Scale scale) {
  const int pieces = width / 8;
#pragma unroll 4
  for (int e = worker; e < kChunk * pieces; e += workers) {
    const int r = e / pieces, c = (e % pieces) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < rows && c < columns) {
      v = __ldg(reinterpret_cast<const uint4*>(src + uint64_t(r) * stride + c));
      if constexpr (!std::is_same_v<Scale, Unscaled>) {
        const float s = scale(r);
        v = make_uint4(scale_pair(v.x, s), scale_pair(v.y, s), scale_pair(v.z, s),
                       scale_pair(v.w, s));
      }
    }
    *reinterpret_cast<uint4*>(dst + r * ld + c) = v;
  }
}

// load_rows' way back: rows r < rows, columns c < columns of src [kChunk][ld] to the rows at
// dst (row stride `stride`), 16 bytes a thread. A warp writes whole rows, where the products'
// fragments would write 16 bytes a row (half of each 32-byte sector).
__device__ __forceinline__ void store_rows(const Bf16* src, int ld, Bf16* dst, uint64_t stride,
                                           int rows, int columns, int worker, int workers) {
  const int pieces = columns / 8;
  for (int e = worker; e < rows * pieces; e += workers) {
    const int r = e / pieces, c = (e % pieces) * 8;
    *reinterpret_cast<uint4*>(dst + uint64_t(r) * stride + c) =
        *reinterpret_cast<const uint4*>(src + r * ld + c);
  }
}

// Tile `job` of step 1's strips: the first kStripTiles are K K^T's, the rest Q K^T's; tile
// (i, n) is row block i, columns 8 n .. 8 n + 7, n < 2 (i + 1).
struct StripTile {
  bool scores;
  int i, n;
};
__device__ __forceinline__ StripTile strip_tile(int job) {
  StripTile tile{job >= kStripTiles, 0, job % kStripTiles};
  while (tile.n >= 2 * (tile.i + 1)) tile.n -= 2 * ++tile.i;
  return tile;
}

template <int kFixedDims>
__global__ void __launch_bounds__(kThreads, 2)
    delta_prepare_bf16_kernel(const Bf16* __restrict__ qkv, const float* __restrict__ g,
                              const float* __restrict__ beta, DeltaNetShape shape,
                              const DeltaSpan* __restrict__ chunks, DeltaScratch scratch) {
  extern __shared__ __align__(16) float smem[];
  const int dk = head_dim_or<kFixedDims>(shape.qk_head_dim);
  const int dv = head_dim_or<kFixedDims>(shape.v_head_dim), vh = int(shape.v_heads);
  const int group = vh / int(shape.qk_heads);
  const Layout layout(dk, dv, group);
  const int ld = layout.ld, width = layout.width;
  float* gram_s = smem;
  float* ad_s = gram_s + kGramFloats;
  float* gates_s = ad_s + kBlocks * kTile * kDiagStride;  // [group][G | beta]
  Bf16* k_s = reinterpret_cast<Bf16*>(gates_s + 2 * kChunk * group);
  Bf16* p_s = k_s;                    // each value head's P, once K is read
  Bf16* qv_s = k_s + layout.k_floor;  // Q, then V's part of B and X
  Bf16* xk_s = qv_s + kChunk * ld;    // K's part of B and X
  Bf16* a_s = xk_s + kChunk * ld;
  Bf16* t_s = a_s + kChunk * kAStride;
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int gi = lane / 4, ti = lane % 4;  // the fragment row and column of this lane

  const DeltaSpan chunk = chunks[blockIdx.x];
  const int kh = int(blockIdx.y);
  const int c0 = chunk.begin;
  const int len = chunk.end - chunk.begin;
  const uint64_t stride = shape.conv_dim();
  const Bf16* q_src = qkv + uint64_t(c0) * stride + size_t(kh) * dk;
  const Bf16* k_src = q_src + shape.qk_dim();
  load_rows(qv_s, ld, width, q_src, stride, len, dk, tid, kThreads, Unscaled{});
  load_rows(k_s, ld, width, k_src, stride, len, dk, tid, kThreads, Unscaled{});
  // Every value head's gates at once, beside Q and K: no head waits on its own loads later.
  load_block_gates(g, beta, c0, len, vh, kh * group, group, tid, gates_s);

  // 1. The lower strips of K K^T and Q K^T, once for the q/k head's value heads: each
  // lane's accumulators are kept as they lie, to be masked and decayed by each value head's
  // gates. The float4 a lane writes and reads back is its own.
  float4* gram_lane = reinterpret_cast<float4*>(gram_s) + warp * kJobsPerWarp * 32 + lane;
  for (int j = 0; j < kJobsPerWarp; ++j) {
    const StripTile tile = strip_tile(warp + kWarps * j);
    if (tile.i * kTile >= len) continue;
    const Bf16* rows = (tile.scores ? qv_s : k_s) + tile.i * kTile * ld;
    const Bf16* keys = k_s + tile.n * 8 * ld;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int kk = 0; kk < width; kk += 32) {
      uint32_t a0[4], a1[4], b[4];
      gpu::load_a_fragment(a0, rows + kk, ld, lane);
      gpu::load_a_fragment(a1, rows + kk + 16, ld, lane);
      gpu::load_bt_fragments_k32(b, keys + kk, ld, lane);
      gpu::mma_bf16_16816(acc, a0, b[0], b[1]);
      gpu::mma_bf16_16816(acc, a1, b[2], b[3]);
    }
    gram_lane[j * 32] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  }

  // X's 16-column units: K's part first (units of dk rounded to 16), then V's.
  const int k_units = round16(dk) / 16, units = k_units + round16(dv) / 16;
  const uint64_t p_stride = uint64_t(vh) * kChunk;
  for (int h = kh * group; h < (kh + 1) * group; ++h) {
    const float* g_s = gates_s + 2 * (h - kh * group) * kChunk;
    const float* b_s = g_s + kChunk;
    __syncthreads();  // the last reads of Q (or of the previous value head's B, X, A)

    // The strips masked and decayed: A_ij = beta_i exp(G_i - G_j) (k_i . k_j), j < i, its
    // diagonal blocks in fp32, the blocks left of them in bf16; P_ij = exp(G_i - G_j)
    // (q_i . k_j), j <= i, in bf16 into p_s (K is read), stored whole in step 2.
    for (int j = 0; j < kJobsPerWarp; ++j) {
      const StripTile tile = strip_tile(warp + kWarps * j);
      if (tile.i * kTile >= len) continue;
      const float4 gram = gram_lane[j * 32];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = tile.i * kTile + gi + 8 * half, c = tile.n * 8 + 2 * ti;
        const float x0 = half == 0 ? gram.x : gram.z, x1 = half == 0 ? gram.y : gram.w;
        if (!tile.scores) {
          const float a0 = c < r ? b_s[r] * __expf(g_s[r] - g_s[c]) * x0 : 0.0f;
          const float a1 = c + 1 < r ? b_s[r] * __expf(g_s[r] - g_s[c + 1]) * x1 : 0.0f;
          if (tile.n / 2 < tile.i) {
            *reinterpret_cast<uint32_t*>(a_s + r * kAStride + c) = gpu::pack_bf16(a0, a1);
          } else {
            float* diagonal = ad_s + (tile.i * kTile + r % kTile) * kDiagStride + c % kTile;
            diagonal[0] = a0;
            diagonal[1] = a1;
          }
        } else if (r < len) {
          const float p0 = c <= r ? __expf(g_s[r] - g_s[c]) * x0 : 0.0f;
          const float p1 = c + 1 <= r ? __expf(g_s[r] - g_s[c + 1]) * x1 : 0.0f;
          *reinterpret_cast<uint32_t*>(p_s + r * kPStride + c) = gpu::pack_bf16(p0, p1);
        }
      }
    }
    __syncthreads();  // A and P are whole

    // 2. T_bb = (I + A_bb)^-1 for the four diagonal blocks, one thread per (block, column):
    // the column's chain of dependent steps is register FMAs. Meanwhile the other warps load
    // B = [diag(beta gamma) K | diag(beta) V], rounded once, and store P (zero right of its
    // diagonal blocks), 16 bytes a thread.
    if (tid < kChunk) {
      const int block = tid / kTile, c = tid % kTile;
      float column[kTile];
      unit_lower_inverse_column(ad_s + block * kTile * kDiagStride, kDiagStride, c, column);
#pragma unroll
      for (int r = 0; r < kTile; ++r)
        t_s[(block * kTile + r) * kTStride + c] = gpu::float_to_bf16(column[r]);
    } else {
      const int loader = tid - kChunk, loaders = kThreads - kChunk;
      load_rows(xk_s, ld, width, k_src, stride, len, dk, loader, loaders,
                [&](int r) { return b_s[r] * __expf(g_s[r]); });
      load_rows(qv_s, ld, width,
                qkv + uint64_t(c0) * stride + 2 * size_t(shape.qk_dim()) + size_t(h) * dv, stride,
                len, dv, loader, loaders, [&](int r) { return b_s[r]; });
      Bf16* p_out = scratch.p_bf16 + (uint64_t(c0) * vh + h) * kChunk;
      for (int e = loader; e < len * (kChunk / 8); e += loaders) {
        const int r = e / (kChunk / 8), c = (e % (kChunk / 8)) * 8;
        *reinterpret_cast<uint4*>(p_out + uint64_t(r) * p_stride + c) =
            c < (r / kTile + 1) * kTile ? *reinterpret_cast<const uint4*>(p_s + r * kPStride + c)
                                        : make_uint4(0, 0, 0, 0);
      }
    }
    __syncthreads();  // the inverses and B are whole

    // 3. X = (I + A)^-1 B on this warp's units: W = X's K part, U' its V part.
    for (int u0 = warp * kWarpUnits; u0 < units; u0 += kWarps * kWarpUnits) {
      Bf16* column[kWarpUnits];
      bool live[kWarpUnits];
#pragma unroll
      for (int q = 0; q < kWarpUnits; ++q) {
        const int u = u0 + q;
        live[q] = u < units;
        column[q] = u < k_units ? xk_s + 16 * u : qv_s + 16 * (u - k_units);
      }
      for (int i = 0; i < kBlocks && i * kTile < len; ++i) {
        // acc = sum_{j < i} A_ij X_j, X_j where B_j was.
        float acc[kWarpUnits][2][4] = {};
        for (int j = 0; j < i; ++j) {
          uint32_t a[4];
          gpu::load_a_fragment(a, a_s + i * kTile * kAStride + j * kTile, kAStride, lane);
#pragma unroll
          for (int q = 0; q < kWarpUnits; ++q)
            if (live[q])
              gpu::mma_bf16_tile16(acc[q][0], acc[q][1], a, column[q] + j * kTile * ld, ld, lane);
        }
        // R_i = B_i - acc, the next product's operand, in B_i's place: each lane reads and
        // writes its own elements.
        if (i > 0) {
#pragma unroll
          for (int q = 0; q < kWarpUnits; ++q) {
            if (!live[q]) continue;
#pragma unroll
            for (int n = 0; n < 2; ++n)
#pragma unroll
              for (int half = 0; half < 2; ++half) {
                uint32_t* at = reinterpret_cast<uint32_t*>(
                    column[q] + (i * kTile + gi + 8 * half) * ld + 8 * n + 2 * ti);
                const float2 b = gpu::unpack_bf16(*at);
                *at = gpu::pack_bf16(b.x - acc[q][n][2 * half], b.y - acc[q][n][2 * half + 1]);
              }
          }
          __syncwarp();  // R_i is whole for the warp's fragment loads
        }
        // X_i = T_ii R_i.
        float x[kWarpUnits][2][4] = {};
        uint32_t a[4];
        gpu::load_a_fragment(a, t_s + i * kTile * kTStride, kTStride, lane);
#pragma unroll
        for (int q = 0; q < kWarpUnits; ++q)
          if (live[q])
            gpu::mma_bf16_tile16(x[q][0], x[q][1], a, column[q] + i * kTile * ld, ld, lane);
        __syncwarp();  // every lane has read R_i before X_i takes its place
#pragma unroll
        for (int q = 0; q < kWarpUnits; ++q) {
          if (!live[q]) continue;
#pragma unroll
          for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int r = i * kTile + gi + 8 * half;
              *reinterpret_cast<uint32_t*>(column[q] + r * ld + 8 * n + 2 * ti) =
                  gpu::pack_bf16(x[q][n][2 * half], x[q][n][2 * half + 1]);
            }
        }
        __syncwarp();  // X_i is in place before the next block row's fragment loads
      }
    }
    __syncthreads();  // X is whole: W, U' to pass 2 (rows of value heads vh apart)
    const uint64_t first_row = uint64_t(c0) * vh + h;
    store_rows(xk_s, ld, scratch.w_bf16 + first_row * dk, uint64_t(vh) * dk, len, dk, tid,
               kThreads);
    store_rows(qv_s, ld, scratch.u_bf16 + first_row * dv, uint64_t(vh) * dv, len, dv, tid,
               kThreads);
    if (tid < len) scratch.g_sum[uint64_t(c0 + tid) * vh + h] = g_s[tid];
  }
}

}  // namespace

cudaError_t launch_delta_prepare_bf16(const Bf16* qkv, const float* g, const float* beta,
                                      DeltaNetShape shape, const DeltaSpan* chunks,
                                      uint32_t chunk_count, const DeltaScratch& scratch,
                                      cudaStream_t stream) {
  const size_t bytes =
      Layout(int(shape.qk_head_dim), int(shape.v_head_dim), int(shape.v_heads / shape.qk_heads))
          .bytes();
  const auto kernel = delta_fixed_head_dims(shape) ? delta_prepare_bf16_kernel<kDeltaFixedHeadDim>
                                                   : delta_prepare_bf16_kernel<0>;
  if (cudaError_t err =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
      err != cudaSuccess)
    return err;
  kernel<<<dim3(chunk_count, shape.qk_heads), kThreads, bytes, stream>>>(qkv, g, beta, shape,
                                                                         chunks, scratch);
  return cudaGetLastError();
}

}  // namespace hsring
