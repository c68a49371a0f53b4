// One way to report CUDA errors per layer. At setup, HSRING_CUDA_CHECK turns a failed call
// into an Error(kCuda) naming the call, file:line and CUDA's own words, with the cudaError_t
// as its detail(); main catches it once. On hot paths, HSRING_CUDA_TRY returns a CudaStatus from
// the enclosing function instead, and the caller decides (a pipeline thread records it and stops).
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

#include "common/error.h"

namespace hsring::gpu {

// The Error of a failed CUDA (or cuBLAS) call: code kCuda, `code` as its detail().
inline Error cuda_error(cudaError_t code, std::string_view message) {
  return Error(Errc::kCuda, message, int64_t(code));
}
// The cudaError_t of a cuda_error (cudaSuccess for an Error of another layer).
inline cudaError_t cuda_code(const Error& e) {
  return e.code() == Errc::kCuda ? cudaError_t(e.detail()) : cudaSuccess;
}

// "cudaMalloc(&p, n) failed at gpu/x.cc:12: out of memory (cudaErrorMemoryAllocation)"
std::string describe_cuda_error(cudaError_t code, const char* call, const char* file, int line);
[[noreturn]] void throw_cuda_error(cudaError_t code, const char* call, const char* file, int line);

// The typed result of a CUDA call on a hot path.
struct CudaStatus {
  cudaError_t code = cudaSuccess;
  const char* call = "";
  const char* file = "";
  int line = 0;
  bool ok() const { return code == cudaSuccess; }
  std::string message() const { return describe_cuda_error(code, call, file, line); }
};

}  // namespace hsring::gpu

#define HSRING_CUDA_CHECK(call)                                                       \
  do {                                                                                \
    const cudaError_t hsring_cuda_error_ = (call);                                    \
    if (hsring_cuda_error_ != cudaSuccess)                                            \
      ::hsring::gpu::throw_cuda_error(hsring_cuda_error_, #call, __FILE__, __LINE__); \
  } while (0)

#define HSRING_CUDA_TRY(call)                                                          \
  do {                                                                                 \
    const cudaError_t hsring_cuda_error_ = (call);                                     \
    if (hsring_cuda_error_ != cudaSuccess)                                             \
      return ::hsring::gpu::CudaStatus{hsring_cuda_error_, #call, __FILE__, __LINE__}; \
  } while (0)
