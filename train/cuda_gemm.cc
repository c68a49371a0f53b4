#include "train/cuda_gemm.h"

#include <cublas_v2.h>

#include "gpu/cuda_check.h"
#include "gpu/ops/bf16_convert.h"
#include "train/cuda_drafter_kernels.h"

#include <fmt/format.h>

#include <limits>
#include <string>

namespace hsring::train {

namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // cuBLAS's advice for Hopper

void check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw gpu::cuda_error(cudaErrorUnknown,
                          std::string(call) + " failed: " + cublasGetStatusString(status));
}

int dim(size_t n) {
  if (n > size_t(std::numeric_limits<int>::max()))
    throw gpu::cuda_error(cudaErrorInvalidValue,
                          fmt::format("a matrix dimension of {} exceeds cuBLAS's int", n));
  return int(n);
}

}  // namespace

struct Gemm::Handle {
  cublasHandle_t handle = nullptr;
  ~Handle() {
    if (handle) (void)cublasDestroy(handle);
  }
};

Gemm::Gemm(GemmPrecision precision) : precision_(precision), handle_(std::make_unique<Handle>()) {
  check(cublasCreate(&handle_->handle), "cublasCreate");
  workspace_ = gpu::DeviceBuffer::allocate(kWorkspaceBytes);
}

Gemm::~Gemm() = default;

void Gemm::bind(cudaStream_t stream) {
  stream_ = stream;
  check(cublasSetStream(handle_->handle, stream), "cublasSetStream");
  check(cublasSetWorkspace(handle_->handle, workspace_.data(), workspace_.size()),
        "cublasSetWorkspace");
}

void Gemm::keep_bf16_copy(const float* matrix, size_t count) {
  if (precision_ != GemmPrecision::kBf16 || count == 0) return;
  Bf16Copy copy{matrix, count, gpu::DeviceBuffer::allocate(count * sizeof(uint16_t))};
  HSRING_CUDA_CHECK(gpu::launch_float_to_bf16(matrix, count, copy.values.as<uint16_t>(), stream_));
  copies_.push_back(std::move(copy));
}

Gemm::Hold& Gemm::free_hold(const float* source, size_t count) {
  // The source's own hold first (held again), then any idle hold whose buffer fits.
  for (Hold& hold : holds_)
    if (hold.active && hold.source == source) return hold;
  Hold* fits = nullptr;
  for (Hold& hold : holds_)
    if (!hold.active && hold.buffer.size() >= count * sizeof(uint16_t) &&
        (!fits || fits->buffer.size() > hold.buffer.size()))
      fits = &hold;
  if (fits) return *fits;
  return holds_.emplace_back();
}

void Gemm::hold_bf16(const float* source, size_t count, const uint16_t* rounded) {
  if (precision_ != GemmPrecision::kBf16 || count == 0) return;
  Hold& hold = free_hold(source, count);
  hold.source = source;
  hold.count = count;
  hold.active = true;
  if (rounded) {
    hold.values = rounded;
    return;
  }
  if (hold.buffer.size() < count * sizeof(uint16_t)) {
    // A held source that grew: its old copy may still be read by an enqueued product.
    HSRING_CUDA_CHECK(cudaStreamSynchronize(stream_));
    hold.buffer = gpu::DeviceBuffer{};
    hold.buffer = gpu::DeviceBuffer::allocate(count * sizeof(uint16_t));
  }
  hold.values = hold.buffer.as<uint16_t>();
  HSRING_CUDA_CHECK(gpu::launch_float_to_bf16(source, count, hold.buffer.as<uint16_t>(), stream_));
}

void Gemm::release_holds() {
  // Products already enqueued keep reading the buffers; the next holds write them in stream
  // order after those products.
  for (Hold& hold : holds_) hold.active = false;
}

const void* Gemm::bf16_operand(Operand operand, size_t count, gpu::DeviceBuffer& scratch) {
  if (operand.bf16()) return operand.bf16();
  const float* source = operand.fp32();
  for (const Hold& hold : holds_)
    if (hold.active && source >= hold.source && source + count <= hold.source + hold.count)
      return hold.values + (source - hold.source);
  for (const Bf16Copy& copy : copies_)
    if (source >= copy.source && source + count <= copy.source + copy.count)
      return copy.values.as<uint16_t>() + (source - copy.source);
  if (scratch.size() < count * sizeof(uint16_t)) {
    // The old scratch may still be read by an enqueued product: wait before freeing it.
    HSRING_CUDA_CHECK(cudaStreamSynchronize(stream_));
    scratch = gpu::DeviceBuffer{};
    scratch = gpu::DeviceBuffer::allocate(count * sizeof(uint16_t));
  }
  HSRING_CUDA_CHECK(gpu::launch_float_to_bf16(source, count, scratch.as<uint16_t>(), stream_));
  return scratch.data();
}

void Gemm::gemm(bool transpose_a, bool transpose_b, size_t m, size_t n, size_t k, Operand a,
                size_t lda, Operand b, size_t ldb, void* c, size_t ldc, bool accumulate,
                bool c_bf16) {
  const float alpha = 1.0f;
  const float beta = accumulate ? 1.0f : 0.0f;
  if (precision_ != GemmPrecision::kBf16 && (c_bf16 || a.bf16() || b.bf16()))
    throw gpu::cuda_error(cudaErrorInvalidValue, "a bf16 product operand needs the bf16 Gemm");
  if (precision_ == GemmPrecision::kBf16) {
    // Column-major extents: op(A) [m, k] is A [m, k] or A [k, m] with leading dimension lda;
    // the last column ends short of a whole lda.
    const auto extent = [](size_t ld, size_t rows, size_t cols) {
      return cols == 0 ? 0 : ld * (cols - 1) + rows;
    };
    const void* a16 =
        bf16_operand(a, transpose_a ? extent(lda, k, m) : extent(lda, m, k), scratch_a_);
    const void* b16 =
        bf16_operand(b, transpose_b ? extent(ldb, n, k) : extent(ldb, k, n), scratch_b_);
    check(cublasGemmEx(handle_->handle, transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                       transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, dim(m), dim(n), dim(k), &alpha, a16,
                       CUDA_R_16BF, dim(lda), b16, CUDA_R_16BF, dim(ldb), &beta, c,
                       c_bf16 ? CUDA_R_16BF : CUDA_R_32F, dim(ldc), CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
    return;
  }
  check(cublasGemmEx(handle_->handle, transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                     transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, dim(m), dim(n), dim(k), &alpha,
                     a.fp32(), CUDA_R_32F, dim(lda), b.fp32(), CUDA_R_32F, dim(ldb), &beta, c,
                     CUDA_R_32F, dim(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

// A row-major [r, c] array is column-major [c, r]: each product below is written for the
// transposed (column-major) views.

void Gemm::forward(Operand x, size_t rows, size_t in, Operand w, size_t out, float* y,
                   bool accumulate) {
  // y^T [out, rows] = (w^T)^T [out, in] x^T [in, rows].
  gemm(true, false, out, rows, in, w, in, x, in, y, out, accumulate);
}

void Gemm::forward(Operand x, size_t rows, size_t in, Operand w, size_t out, uint16_t* y) {
  gemm(true, false, out, rows, in, w, in, x, in, y, out, false, true);
}

void Gemm::backward_input(Operand dy, size_t rows, size_t out, Operand w, size_t in, float* dx,
                          bool accumulate) {
  // dx^T [in, rows] = w^T [in, out] dy^T [out, rows].
  gemm(false, false, in, rows, out, w, in, dy, out, dx, in, accumulate);
}

void Gemm::backward_input(Operand dy, size_t rows, size_t out, Operand w, size_t in, uint16_t* dx) {
  gemm(false, false, in, rows, out, w, in, dy, out, dx, in, false, true);
}

void Gemm::backward_weight(Operand dy, size_t rows, size_t out, Operand x, size_t in, float* dw,
                           bool accumulate, size_t dy_stride) {
  weight_product(dy, rows, out, x, in, dw, accumulate, dy_stride, false);
}

void Gemm::backward_weight(Operand dy, size_t rows, size_t out, Operand x, size_t in, uint16_t* dw,
                           bool accumulate, size_t dy_stride) {
  weight_product(dy, rows, out, x, in, dw, accumulate, dy_stride, true);
}

void Gemm::weight_product(Operand dy, size_t rows, size_t out, Operand x, size_t in, void* dw,
                          bool accumulate, size_t dy_stride, bool dw_bf16) {
  // dw^T [in, out] (+)= x^T [in, rows] (dy^T)^T [rows, out].
  if (dy_stride == 0) dy_stride = out;
  if (dy_stride < out)
    throw gpu::cuda_error(
        cudaErrorInvalidValue,
        fmt::format("a gradient's row stride {} is shorter than its row of {}", dy_stride, out));
  gemm(false, true, in, out, rows, x, in, dy, dy_stride, dw, in, accumulate, dw_bf16);
}

}  // namespace hsring::train
