// The three products of a linear layer's training step on cuBLAS, on row-major arrays with
// HF-layout weights w [out, in]. kBf16 multiplies in bf16 on the tensor cores with fp32
// accumulation (cuBLAS's native bf16 kernels run at about twice the rate of
// CUBLAS_COMPUTE_32F_FAST_16BF on fp32 arrays): an fp32 operand is rounded to bf16 (to
// nearest even) into the Gemm's own scratch, unless held or kept in bf16 already, and a bf16
// operand (Operand) is read as it is. The master weights stay fp32. kFp32 multiplies in full
// fp32, which the tests use to check the step's maths against the CPU reference to ~1e-5.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "gpu/cuda_handles.h"

namespace hsring::train {

enum class GemmPrecision { kBf16, kFp32 };

// A product's input matrix: fp32 values (rounded to bf16 by the kBf16 Gemm, unless held or
// kept), or bf16 values that the kernel making them wrote so, read as they are (kBf16
// only). Converts implicitly from either pointer, as the array it names.
class Operand {
 public:
  Operand() = default;                                // no array yet
  Operand(const float* values) : fp32_(values) {}     // NOLINT(google-explicit-constructor)
  Operand(const uint16_t* values) : bf16_(values) {}  // NOLINT(google-explicit-constructor)
  const float* fp32() const { return fp32_; }         // null for a bf16 operand
  const uint16_t* bf16() const { return bf16_; }      // null for an fp32 operand

 private:
  const float* fp32_ = nullptr;
  const uint16_t* bf16_ = nullptr;
};

class Gemm {
 public:
  // A cuBLAS handle on the current device with its own workspace. Throws Error(kCuda).
  explicit Gemm(GemmPrecision precision);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Later products run on `stream`.
  void bind(cudaStream_t stream);
  GemmPrecision precision() const { return precision_; }

  // kBf16: products reading any of matrix[0, count) read a bf16 copy made now, on the bound
  // stream, instead of rounding it at each product. No effect for kFp32.
  // REQUIRES: the matrix does not change, nor is freed, while this Gemm lives.
  void keep_bf16_copy(const float* matrix, size_t count);

  // kBf16: until release_holds(), products reading any of source[0, count) read one bf16
  // copy instead of rounding the array at each product: rounded now on the bound stream, or
  // `rounded` when the caller has the same values in bf16 already (it must then outlive the
  // hold). For arrays that several products read; holding a held source again rounds it
  // again, so hold after every change of the array. No effect for kFp32.
  // REQUIRES: source does not change while held, except just before it is held again.
  void hold_bf16(const float* source, size_t count, const uint16_t* rounded = nullptr);
  // Ends every hold; their buffers are kept for the next ones.
  void release_holds();

  // The products below throw Error(kCuda) for a bf16 operand or output on the kFp32 Gemm.
  // y [rows, out] = x [rows, in] w^T, added to y with `accumulate`.
  void forward(Operand x, size_t rows, size_t in, Operand w, size_t out, float* y,
               bool accumulate = false);
  // y [rows, out] = x [rows, in] w^T written in bf16, the fp32 accumulator rounded to
  // nearest even, for an output only products read.
  void forward(Operand x, size_t rows, size_t in, Operand w, size_t out, uint16_t* y);
  // dx [rows, in] = dy [rows, out] w, added to dx with `accumulate`, or written in bf16.
  void backward_input(Operand dy, size_t rows, size_t out, Operand w, size_t in, float* dx,
                      bool accumulate = false);
  void backward_input(Operand dy, size_t rows, size_t out, Operand w, size_t in, uint16_t* dx);
  // dw [out, in] += dy^T x, or = without `accumulate`. dy's rows are dy_stride elements
  // apart (0: out), so that dy may be a column range of a wider array.
  void backward_weight(Operand dy, size_t rows, size_t out, Operand x, size_t in, float* dw,
                       bool accumulate = true, size_t dy_stride = 0);
  // The same in bf16 (kBf16 only), the fp32 accumulator (plus dw's value with
  // `accumulate`) rounded to nearest even.
  void backward_weight(Operand dy, size_t rows, size_t out, Operand x, size_t in, uint16_t* dw,
                       bool accumulate = true, size_t dy_stride = 0);

 private:
  struct Handle;
  // C [m, n] column-major = op(A) op(B) (+ C); the three products above are its cases.
  // c is fp32, or bf16 with c_bf16 (kBf16 only).
  void gemm(bool transpose_a, bool transpose_b, size_t m, size_t n, size_t k, Operand a, size_t lda,
            Operand b, size_t ldb, void* c, size_t ldc, bool accumulate, bool c_bf16 = false);
  void weight_product(Operand dy, size_t rows, size_t out, Operand x, size_t in, void* dw,
                      bool accumulate, size_t dy_stride, bool dw_bf16);

  struct Bf16Copy {
    const float* source;
    size_t count;
    gpu::DeviceBuffer values;
  };
  // The bf16 values of `source` [count]: its own, a held or kept copy, or `scratch` (grown)
  // rounded now.
  const void* bf16_operand(Operand source, size_t count, gpu::DeviceBuffer& scratch);

  GemmPrecision precision_;
  std::unique_ptr<Handle> handle_;
  gpu::DeviceBuffer workspace_;
  cudaStream_t stream_ = nullptr;
  gpu::DeviceBuffer scratch_a_, scratch_b_;  // kBf16: the operands rounded for one product
  std::vector<Bf16Copy> copies_;
  struct Hold {
    const float* source = nullptr;
    size_t count = 0;
    const uint16_t* values = nullptr;  // `buffer`'s, or the caller's
    gpu::DeviceBuffer buffer;
    bool active = false;
  };
  Hold& free_hold(const float* source, size_t count);
  std::vector<Hold> holds_;
};

}  // namespace hsring::train
