// Stand-in for a real target's forward compute: square bf16 GEMMs through cuBLAS on the
// forward's stream, as many as make up a requested FLOP count per batch. It keeps the GPU
// as busy as a model would, so the benchmark can show the copy off the critical path.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "gpu/cuda_check.h"

namespace hsring::gpu {

class GemmLoad {
 public:
  // Allocates three n x n bf16 matrices on the current device, fills the inputs with
  // non-zero values, and binds a cuBLAS handle to `stream`. Throws Error(kCuda).
  static std::unique_ptr<GemmLoad> create(cudaStream_t stream, uint32_t n = 8192);
  ~GemmLoad();
  GemmLoad(const GemmLoad&) = delete;
  GemmLoad& operator=(const GemmLoad&) = delete;

  double flops_per_gemm() const { return 2.0 * double(n_) * double(n_) * double(n_); }
  // Enqueues ceil(flops / flops_per_gemm()) GEMMs (none for flops <= 0).
  CudaStatus run(double flops);

 private:
  struct State;
  explicit GemmLoad(std::unique_ptr<State> state, uint32_t n);
  std::unique_ptr<State> state_;
  uint32_t n_;
};

}  // namespace hsring::gpu
