// The warp-level bf16 and TF32 tensor-core products (mma.sync, fp32 accumulation) and the
// ldmatrix loads of its fragments from shared memory (sm_80 and later), for the attention
// and grouped-GEMM kernels of model/ and train/. Hopper's warpgroup products are
// gpu/wgmma.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/cp_async.cuh"

namespace hsring::gpu {

// d += a b: a 16x16 bf16 (row-major fragment, 4 registers), b 16x8 bf16 (column-major
// fragment b0, b1), d 16x8 fp32 (d0, d1: row g, columns 2t, 2t + 1; d2, d3: row g + 8, for
// lane 4 g + t).
__device__ __forceinline__ void mma_bf16_16816(float* d, const uint32_t* a, uint32_t b0,
                                               uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// x rounded to TF32 (to nearest, ties away from zero), as the bits a TF32 operand takes.
__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t bits;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(bits) : "f"(x));
  return bits;
}

// d += a b in TF32 (m16n8k8, fp32 accumulation): a 16x8 (a0: row g, column t; a1: row
// g + 8; a2, a3: columns t + 4), b 8x8 (b0: row t, column g; b1: row t + 4), d 16x8 as
// mma_bf16_16816's, for lane 4 g + t.
__device__ __forceinline__ void mma_tf32_1688(float* d, const uint32_t* a, uint32_t b0,
                                              uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 bf16 matrices, lanes 8 m .. 8 m + 7 addressing the rows of matrix m; lane 4 g + t
// receives row g, columns 2t and 2t + 1 of each (the B fragment of an [n][k] tile).
__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(smem))
               : "memory");
}

// The same, transposed on the way: B fragments of a row-major [k][n] tile.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(smem))
               : "memory");
}

// The fragments of 16 x 16 bf16 tiles in shared memory (row stride ld values, rows 16-byte
// aligned), for the `lane` of a warp:
// - A of the row-major [m][k] tile at `tile`;
__device__ __forceinline__ void load_a_fragment(uint32_t* a, const uint16_t* tile, int ld,
                                                int lane) {
  ldmatrix_x4(a, tile + (lane % 16) * ld + (lane / 16) * 8);
}
// - A of the tile whose transpose, [k][m], is at `tile`;
__device__ __forceinline__ void load_a_fragment_transposed(uint32_t* a, const uint16_t* tile,
                                                           int ld, int lane) {
  ldmatrix_x4_trans(a, tile + ((lane % 8) + (lane / 16) * 8) * ld + ((lane / 8) % 2) * 8);
}
// - B of the row-major [k][n] tile at `tile`: b[0], b[1] for columns 0..7, b[2], b[3] for
//   columns 8..15.
__device__ __forceinline__ void load_b_fragments(uint32_t* b, const uint16_t* tile, int ld,
                                                 int lane) {
  ldmatrix_x4_trans(b, tile + ((lane % 8) + ((lane / 8) % 2) * 8) * ld + (lane / 16) * 8);
}
// - B of the 8 columns whose transpose, [n][k] with k 32 wide, is at `tile`: b[0], b[1] for
//   k 0..15, b[2], b[3] for k 16..31 (a gram product's keys, read as they are stored).
__device__ __forceinline__ void load_bt_fragments_k32(uint32_t* b, const uint16_t* tile, int ld,
                                                      int lane) {
  ldmatrix_x4(b, tile + (lane % 8) * ld + (lane / 8) * 8);
}

// d0 += a B[:, 0..7] and d1 += a B[:, 8..15]: a 16 x 16 A fragment (load_a_fragment's)
// times the row-major [16][16] bf16 tile B at `tile` (load_b_fragments').
__device__ __forceinline__ void mma_bf16_tile16(float* d0, float* d1, const uint32_t* a,
                                                const uint16_t* tile, int ld, int lane) {
  uint32_t b[4];
  load_b_fragments(b, tile, ld, lane);
  mma_bf16_16816(d0, a, b[0], b[1]);
  mma_bf16_16816(d1, a, b[2], b[3]);
}

}  // namespace hsring::gpu
