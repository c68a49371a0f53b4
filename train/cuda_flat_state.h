// A GPU trainer's flat fp32 buffers on the device (master weights, gradient, AdamW's two
// moments, each ParamLayout::total floats) and what is done to them as a whole: zeroing
// and scaling the gradient, the clipped AdamW update, and the copies to and from the host
// for checkpoints and the CPU group exchange. Shared by every CUDA trainer so the update
// and the checkpointed state are the same whatever the objective.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "gpu/cuda_handles.h"
#include "train/drafter_trainer.h"
#include "train/optimizer.h"

namespace hsring::train {

// A device array of T that grows to the largest size asked for (its contents are not kept).
template <class T>
class Scratch {
 public:
  void ensure(size_t count) { grow(count, count); }
  // For a size that changes from step to step (an attention plan): when it grows, a quarter
  // more, so that the next steps rarely reallocate (cudaFree waits for the whole device).
  void ensure_varying(size_t count) { grow(count, count + count / 4); }
  T* get() const { return buffer_.as<T>(); }

 private:
  void grow(size_t count, size_t to) {
    if (count > capacity_) {
      buffer_ = gpu::DeviceBuffer::allocate(to * sizeof(T));
      capacity_ = to;
    }
  }
  gpu::DeviceBuffer buffer_;
  size_t capacity_ = 0;
};

// Thread safety: none; everything is enqueued on the stream given at construction.
class FlatState {
 public:
  // Allocates the four buffers, copies `initial` (layout.total floats) into the weights and
  // zeroes the rest; returns once the copy is done. Throws Error(kModelBadConfig) for
  // invalid optimizer options, Error(kCuda) when device memory does not suffice.
  FlatState(const ParamLayout& layout, const AdamWOptions& optimizer,
            std::span<const float> initial, cudaStream_t stream);

  float* params(size_t offset = 0) const { return params_.as<float>() + offset; }
  // From now on, a bf16 copy of the weights (rounded to nearest even) kept up to date by
  // every update and load_state: the bf16 products' operand, written by the update itself
  // rather than rounded in a pass of its own at each step's start.
  void keep_bf16_params();
  const uint16_t* params_bf16() const { return params_bf16_.as<uint16_t>(); }  // or nullptr
  float* grads(size_t offset = 0) const { return grads_.as<float>() + offset; }
  size_t size() const { return total_; }

  // From now on a step may leave its matrices' gradients in bf16, as the bf16 products
  // write them (as autocast's do), half the bytes for the products, the norm and the
  // update to move: keep_bf16_gradients() allocates their array (zeros where no matrix
  // is), and matrix_gradients_in_bf16() says the step's are there from the products on
  // (until the next zero_gradients()); the vectors' stay in grads(). Whatever reads or
  // changes the gradients as one fp32 array widens them into grads() first
  // (fp32_gradients(): an exchange's all-reduce, scale, host_gradients, download).
  void keep_bf16_gradients();
  uint16_t* grads_bf16(size_t offset = 0) const { return grads_bf16_.as<uint16_t>() + offset; }
  void matrix_gradients_in_bf16();
  float* fp32_gradients();

  void zero_gradients();
  // Only the vectors' gradients (the norms' weights, which kernels add to): for a step whose
  // products write every matrix's gradient rather than add to it.
  void zero_vector_gradients();
  void scale_gradients(float factor);
  // Global-norm clipping and one AdamW step at the schedule's rate; a non-finite norm
  // skips the update (a host decision: synchronises once).
  UpdateStats apply_gradients();
  uint64_t step() const { return step_; }

  std::span<float> host_gradients();  // downloads; host_gradients_changed uploads it back
  void host_gradients_changed();
  std::vector<float> download_params() const;
  std::vector<float> download_gradients();
  TrainerState state() const;
  // Throws Error(kModel) unless every buffer holds size() floats; then nothing
  // changes.
  void load_state(const TrainerState& state);

 private:
  ParamLayout layout_;
  AdamWOptions optimizer_;
  cudaStream_t stream_;
  size_t total_;
  gpu::DeviceBuffer params_, grads_, m_, v_;
  gpu::DeviceBuffer params_bf16_;  // empty unless keep_bf16_params()
  gpu::DeviceBuffer grads_bf16_;   // empty unless keep_bf16_gradients()
  bool matrices_in_bf16_ = false;  // the matrices' gradients are in grads_bf16_, not grads_
  // The squared norm's partial sums: one slot of kNormPartials for the whole array, then
  // (matrices in bf16) one for each vector's fp32 gradient.
  gpu::DeviceBuffer norm_partials_;
  gpu::PinnedBuffer norm_partials_host_;
  double squared_norm();
  uint64_t step_ = 0;
  std::vector<float> host_gradients_;
};

}  // namespace hsring::train
