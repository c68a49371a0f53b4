// The three products of a linear layer's training step on cuBLAS, on fp32 row-major arrays
// with HF-layout weights w [out, in]. kBf16 multiplies in bf16 on the tensor cores with fp32
// accumulation (CUBLAS_COMPUTE_32F_FAST_16BF: the inputs are rounded to bf16 inside cuBLAS,
// the master weights and activations stay fp32); kFp32 multiplies in full fp32, which the
// tests use to check the step's maths against the CPU reference to ~1e-5.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "gpu/cuda_handles.h"

namespace hsring::train::cuda {

enum class GemmPrecision { kBf16, kFp32 };

class Gemm {
 public:
  // A cuBLAS handle on the current device with its own workspace. Throws gpu::CudaError.
  explicit Gemm(GemmPrecision precision);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Later products run on `stream`.
  void bind(cudaStream_t stream);
  GemmPrecision precision() const { return precision_; }

  // y [rows, out] = x [rows, in] w^T, added to y with `accumulate`.
  void forward(const float* x, size_t rows, size_t in, const float* w, size_t out, float* y,
               bool accumulate = false);
  // dx [rows, in] = dy [rows, out] w, added to dx with `accumulate`.
  void backward_input(const float* dy, size_t rows, size_t out, const float* w, size_t in,
                      float* dx, bool accumulate = false);
  // dw [out, in] += dy^T x.
  void backward_weight(const float* dy, size_t rows, size_t out, const float* x, size_t in,
                       float* dw);

 private:
  struct Handle;
  // C [m, n] column-major = op(A) op(B) (+ C); the three products above are its cases.
  void gemm(bool transpose_a, bool transpose_b, size_t m, size_t n, size_t k, const float* a,
            size_t lda, const float* b, size_t ldb, float* c, size_t ldc, bool accumulate);

  GemmPrecision precision_;
  std::unique_ptr<Handle> handle_;
  gpu::DeviceBuffer workspace_;
};

}  // namespace hsring::train::cuda
