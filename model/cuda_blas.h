// The cuBLAS side of the CUDA forward: one handle with its own workspace, and the one
// product shape the model needs, y = x w^T with HF-layout weights, bf16 inputs and fp32
// accumulation.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "gpu/cuda_handles.h"
#include "model/cuda_kernels.h"

namespace hsring {

class Blas {
 public:
  // A handle on the current device. Throws Error(kCuda).
  Blas();
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // Later products run on `stream`. The workspace is bound again each time (cuBLAS drops it
  // on a stream change); one fixed workspace keeps the algorithm choice, and so the bits,
  // the same from call to call.
  void bind(cudaStream_t stream);

  // y[r, o] = beta * y[r, o] + sum_i x[r, i] w[o, i]: x bf16 [rows, in], w bf16 [out, in]
  // (HF Linear layout), y fp32 or bf16 with row stride ldy >= out. beta is 0 or 1 (1: add
  // into an fp32 residual). Throws Error(kCuda) naming cuBLAS's status.
  void linear(const Bf16* x, uint32_t rows, uint32_t in, const Bf16* w, uint32_t out, void* y,
              bool y_fp32, uint64_t ldy, float beta = 0.0f);

 private:
  struct Handle;
  std::unique_ptr<Handle> handle_;
  gpu::DeviceBuffer workspace_;
};

}  // namespace hsring
