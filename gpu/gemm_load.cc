#include "gpu/gemm_load.h"

#include <cublas_v2.h>

#include <cmath>
#include <string>

#include "gpu/cuda_handles.h"
#include "gpu/kernels.h"

namespace hsring::gpu {

struct GemmLoad::State {
  cublasHandle_t handle = nullptr;
  DeviceBuffer a, b, c;
  ~State() {
    if (handle) cublasDestroy(handle);
  }
};

namespace {

void check_cublas(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw cuda_error(cudaErrorUnknown,
                     std::string(call) + " failed: " + cublasGetStatusString(status));
}

}  // namespace

GemmLoad::GemmLoad(std::unique_ptr<State> state, uint32_t n) : state_(std::move(state)), n_(n) {}
GemmLoad::~GemmLoad() = default;

std::unique_ptr<GemmLoad> GemmLoad::create(cudaStream_t stream, uint32_t n) {
  auto state = std::make_unique<State>();
  const size_t bytes = size_t(n) * n * 2;
  state->a = DeviceBuffer::allocate(bytes);
  state->b = DeviceBuffer::allocate(bytes);
  state->c = DeviceBuffer::allocate(bytes);
  // Synthetic values: finite, non-zero, varied (zeros would make the GEMMs run faster
  // than a model's would).
  HSRING_CUDA_CHECK(launch_synthetic_layers(state->a.data(), 0, 1, 1, n, n, 2, stream));
  HSRING_CUDA_CHECK(launch_synthetic_layers(state->b.data(), 0, 2, 1, n, n, 2, stream));
  check_cublas(cublasCreate(&state->handle), "cublasCreate");
  check_cublas(cublasSetStream(state->handle, stream), "cublasSetStream");
  HSRING_CUDA_CHECK(cudaStreamSynchronize(stream));
  return std::unique_ptr<GemmLoad>(new GemmLoad(std::move(state), n));
}

CudaStatus GemmLoad::run(double flops) {
  if (!(flops > 0)) return {};
  const auto count = uint64_t(std::ceil(flops / flops_per_gemm()));
  const float alpha = 1.0f / float(n_), beta = 0.0f;
  const int n = int(n_);
  for (uint64_t i = 0; i < count; ++i) {
    const cublasStatus_t status =
        cublasGemmEx(state_->handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, state_->a.data(),
                     CUDA_R_16BF, n, state_->b.data(), CUDA_R_16BF, n, &beta, state_->c.data(),
                     CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (status != CUBLAS_STATUS_SUCCESS)
      return CudaStatus{cudaErrorLaunchFailure, "cublasGemmEx", __FILE__, __LINE__};
  }
  return {};
}

}  // namespace hsring::gpu
