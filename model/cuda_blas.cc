#include "model/cuda_blas.h"

#include <cublas_v2.h>

#include <string>

namespace hsring {

namespace {

// cuBLAS's recommendation for Hopper; also enough for every earlier architecture.
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

void check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw gpu::cuda_error(cudaErrorUnknown,
                          std::string(call) + " failed: " + cublasGetStatusString(status));
}

}  // namespace

struct Blas::Handle {
  cublasHandle_t handle = nullptr;
  ~Handle() {
    if (handle) (void)cublasDestroy(handle);
  }
};

Blas::Blas() : handle_(std::make_unique<Handle>()) {
  check(cublasCreate(&handle_->handle), "cublasCreate");
  workspace_ = gpu::DeviceBuffer::allocate(kWorkspaceBytes);
}

Blas::~Blas() = default;

void Blas::bind(cudaStream_t stream) {
  check(cublasSetStream(handle_->handle, stream), "cublasSetStream");
  check(cublasSetWorkspace(handle_->handle, workspace_.data(), workspace_.size()),
        "cublasSetWorkspace");
}

void Blas::linear(const Bf16* x, uint32_t rows, uint32_t in, const Bf16* w, uint32_t out, void* y,
                  bool y_fp32, uint64_t ldy, float beta) {
  // Column-major view: y^T [out, rows] = w [out, in] (w^T stored column-major, hence OP_T)
  // times x^T [in, rows] (x row-major is x^T column-major).
  const float alpha = 1.0f;
  check(cublasGemmEx(handle_->handle, CUBLAS_OP_T, CUBLAS_OP_N, int(out), int(rows), int(in),
                     &alpha, w, CUDA_R_16BF, int(in), x, CUDA_R_16BF, int(in), &beta, y,
                     y_fp32 ? CUDA_R_32F : CUDA_R_16BF, int(ldy), CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

}  // namespace hsring
