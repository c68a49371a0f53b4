// Hopper's warpgroup products (wgmma.mma_async, sm_90a only) for bf16 tiles of 64 rows and
// 128 or 256 columns (a head_dim) in shared memory, as the attention kernels on wgmma use
// them (train/cuda_block_attention_wgmma.cu, model/cuda_attention_wgmma.cu).
//
// A tile is panels of 64 columns (kPanelBytes apart), each 64 rows of 128 bytes in the
// 128-byte swizzle: the 16-byte chunk c of row r sits at chunk c ^ (r % 8) of its row, so
// the eight rows of a 1024-byte atom spread any one chunk over all 32 banks (without it,
// the products' reads of eight rows of one chunk fell in the same banks). Tiles start on
// 1024 bytes. The same bytes serve both ways a product reads a tile (PTX ISA, "Shared
// Memory Matrix Layout", canonical layouts of the 128B swizzle):
// - K-major, the contraction along the columns (S = Q K^T reads Q and K so): SBO is the
//   1024 bytes between 8-row groups; a k step of 16 columns starts 32 bytes on, in its panel;
// - MN-major, the contraction along the rows (dV += P^T dO reads dO so, as B): LBO is the
//   step between the 64-column panels (along N), SBO the 1024 bytes between 8-row groups
//   (along K); a k step of 16 rows starts 2048 bytes on.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#ifdef __CUDACC__
#include "gpu/bf16.cuh"
#endif

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "gpu/wgmma.cuh needs sm_90a: compile with -gencode arch=compute_90a,code=sm_90a"
#endif

namespace hsring::gpu::wgmma {

constexpr int kTileRows = 64;
constexpr int kPanelColumns = 64;                        // bf16 columns of a panel row
constexpr uint32_t kRowBytes = 128;                      // a panel's row
constexpr uint32_t kAtomBytes = 8 * kRowBytes;           // 8 rows: the swizzle's period
constexpr uint32_t kPanelBytes = kTileRows * kRowBytes;  // 8192
constexpr uint32_t kAlignment = kAtomBytes;
// Bytes of a tile of `columns` (a multiple of 64) bf16 columns.
constexpr uint32_t tile_bytes(int columns) {
  return uint32_t(columns / kPanelColumns) * kPanelBytes;
}

// The layout and the descriptors are host functions too: tests/gpu/wgmma_layout_test.cc
// checks them against the ISA's canonical layouts on any machine.

// The byte offset of row r's 16 bytes of columns [8 chunk, 8 chunk + 8) in a tile.
__host__ __device__ inline uint32_t offset_of(int row, int chunk) {
  return uint32_t(chunk / 8) * kPanelBytes + uint32_t(row) * kRowBytes +
         uint32_t((chunk % 8) ^ (row % 8)) * 16;
}

// A shared-memory matrix descriptor: start address, LBO and SBO (each >> 4, 14 bits), base
// offset 0, layout type 1 (bits 62-63: the 128-byte swizzle).
__host__ __device__ inline uint64_t descriptor(uint32_t smem_address, uint32_t lbo, uint32_t sbo) {
  return uint64_t((smem_address >> 4) & 0x3FFF) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);
}
// A k step's descriptor is its tile's plus the step's byte offset >> 4 in the address field:
// one add of a constant, where building each from its address took the kernels a handful
// of instructions a product. Exact while the address stays below 2^18 (the 14-bit field;
// shared memory ends at 228 KB).
// The tile at smem_address read K-major, k step kk (columns [16 kk, 16 kk + 16)). LBO is
// unused in a swizzled K-major layout (1 by convention).
__host__ __device__ inline uint64_t k_major(uint32_t smem_address, int kk) {
  return descriptor(smem_address, 16, kAtomBytes) +
         ((uint32_t(kk / 4) * kPanelBytes + uint32_t(kk % 4) * 32) >> 4);
}
// The tile at smem_address read MN-major, k step kk (rows [16 kk, 16 kk + 16)).
__host__ __device__ inline uint64_t mn_major(uint32_t smem_address, int kk) {
  return descriptor(smem_address, kPanelBytes, kAtomBytes) + ((uint32_t(kk) * 2 * kAtomBytes) >> 4);
}

// Orders the warpgroup's register writes before the products that read them
// (wgmma.fence): needed before the first product of a batch whose accumulators or A
// fragments were touched by ordinary instructions.
__device__ inline void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ inline void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N committed groups are still running.
template <int N>
__device__ inline void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Makes this thread's completed generic-proxy writes to shared memory (cp.async, plain
// stores) visible to the products' async-proxy reads; then a barrier, then the products.
__device__ inline void fence_shared_writes() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Pins accumulators at this point of the program: the compiler may not move their reads or
// writes across it (after a wait, before the next batch).
template <int N>
__device__ inline void pin(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d (64 x 64 fp32) = or += A B, A [64 x 16] and B [16 x 64] both from shared memory,
// K-major. Thread t holds rows 16 (t / 32) + (t % 32) / 4 (+ 8), columns 8 j + 2 (t % 4)
// (+ 1) in d[4 j .. 4 j + 3], as mma.sync's m16n8 accumulator per 8-column tile.
__device__ inline void mma_64x64_ss(float (&d)[32], uint64_t a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(int(accumulate)));
}

// d (64 x 128 fp32) += A B, A [64 x 16] from registers (each warp's 16 rows as mma.sync's
// m16n8k16 A fragment), B [16 x 128] from shared memory, MN-major. d's layout as above,
// j over 16 column tiles.
__device__ inline void mma_64x128_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"  // always accumulate
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1));
}

// The products' helpers, in device compiles only (tests/gpu/wgmma_layout_test.cc reads the
// layout above on the host, where gpu/bf16.cuh does not compile).
#ifdef __CUDACC__
// d (64 x 64 fp32) = A B^T over kColumns (a multiple of 16): tiles at a_tile and b_tile, both
// read K-major. Issued, not committed: the caller commits and waits.
template <int kColumns>
__device__ inline void mma_64x64_tiles(float (&d)[32], uint32_t a_tile, uint32_t b_tile) {
#pragma unroll
  for (int kk = 0; kk < kColumns / 16; ++kk)
    mma_64x64_ss(d, k_major(a_tile, kk), k_major(b_tile, kk), kk > 0);
}

// The register A fragment of columns [16 kk, 16 kk + 16) of a 64 x 64 accumulator, rounded to
// bf16: one product's output (scores) as the next product's A operand (P V).
__device__ inline void a_fragment(uint32_t (&a)[4], const float (&d)[32], int kk) {
  a[0] = pack_bf16(d[8 * kk], d[8 * kk + 1]);
  a[1] = pack_bf16(d[8 * kk + 2], d[8 * kk + 3]);
  a[2] = pack_bf16(d[8 * kk + 4], d[8 * kk + 5]);
  a[3] = pack_bf16(d[8 * kk + 6], d[8 * kk + 7]);
}
#endif

}  // namespace hsring::gpu::wgmma
