// cp.async (global to shared memory without passing through registers; sm_80 and later) and
// the shared-memory address the PTX instructions take, for every tensor-core kernel of
// model/ and train/. The waits clobber memory, so that no read of the tile is moved above
// them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace hsring::gpu {

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1 (.cg); when !valid the 16 bytes are zero-filled and
// src is not read (it must still be a valid address expression, not dereferenced).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}

// 4 bytes global -> shared, through L1 (.cg takes 16 bytes only); zero-filled when !valid.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(valid ? 4 : 0)
               : "memory");
}

// Closes the group of copies started since the last commit.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most kPending of this thread's committed groups are still in flight (0: all
// landed). Other threads' copies are visible only after a barrier.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace hsring::gpu
