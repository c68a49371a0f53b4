#include "train/cuda_flat_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"
#include "gpu/cuda_check.h"
#include "gpu/ops/bf16_convert.h"
#include "train/cuda_drafter_kernels.h"

namespace hsring::train {

namespace {

// A matrix's gradient is a product's (bf16 with keep_bf16_gradients); a vector's (a norm's
// weight) is summed by kernels in fp32.
bool is_matrix(const ParamInfo& tensor) { return tensor.shape.size() == 2; }

std::vector<float> download(const gpu::DeviceBuffer& buffer, cudaStream_t stream) {
  std::vector<float> host(buffer.size() / sizeof(float));
  HSRING_CUDA_CHECK(
      cudaMemcpyAsync(host.data(), buffer.data(), buffer.size(), cudaMemcpyDeviceToHost, stream));
  HSRING_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host;
}

}  // namespace

FlatState::FlatState(const ParamLayout& layout, const AdamWOptions& optimizer,
                     std::span<const float> initial, cudaStream_t stream)
    : layout_(layout), optimizer_(optimizer), stream_(stream), total_(layout.total) {
  if (std::string why = validate_adamw_options(optimizer_); !why.empty())
    throw Error(Errc::kModelBadConfig, "optimizer: " + why);
  if (initial.size() != total_)
    throw Error(Errc::kModel,
                fmt::format("initial weights hold {} values, not {}", initial.size(), total_));
  const size_t bytes = total_ * sizeof(float);
  params_ = gpu::DeviceBuffer::allocate(bytes);
  grads_ = gpu::DeviceBuffer::allocate(bytes);
  m_ = gpu::DeviceBuffer::allocate(bytes);
  v_ = gpu::DeviceBuffer::allocate(bytes);
  const size_t slots = 1 + size_t(std::count_if(layout.tensors.begin(), layout.tensors.end(),
                                                [](const ParamInfo& t) { return !is_matrix(t); }));
  norm_partials_ = gpu::DeviceBuffer::allocate(slots * kNormPartials * sizeof(double));
  norm_partials_host_ = gpu::PinnedBuffer::allocate(norm_partials_.size());
  HSRING_CUDA_CHECK(
      cudaMemcpyAsync(params_.data(), initial.data(), bytes, cudaMemcpyHostToDevice, stream_));
  HSRING_CUDA_CHECK(cudaMemsetAsync(grads_.data(), 0, bytes, stream_));
  HSRING_CUDA_CHECK(cudaMemsetAsync(m_.data(), 0, bytes, stream_));
  HSRING_CUDA_CHECK(cudaMemsetAsync(v_.data(), 0, bytes, stream_));
  HSRING_CUDA_CHECK(cudaStreamSynchronize(stream_));  // `initial` may go out of scope
}

void FlatState::keep_bf16_params() {
  if (params_bf16_.size() == 0)
    params_bf16_ = gpu::DeviceBuffer::allocate(std::max<size_t>(1, total_) * sizeof(uint16_t));
  HSRING_CUDA_CHECK(
      gpu::launch_float_to_bf16(params(), total_, params_bf16_.as<uint16_t>(), stream_));
}

void FlatState::keep_bf16_gradients() {
  if (grads_bf16_.size() != 0) return;
  grads_bf16_ = gpu::DeviceBuffer::allocate(std::max<size_t>(1, total_) * sizeof(uint16_t));
  HSRING_CUDA_CHECK(cudaMemsetAsync(grads_bf16_.data(), 0, grads_bf16_.size(), stream_));
}

void FlatState::matrix_gradients_in_bf16() {
  if (grads_bf16_.size() == 0)
    throw gpu::cuda_error(cudaErrorInvalidValue, "bf16 gradients need keep_bf16_gradients()");
  matrices_in_bf16_ = true;
}

float* FlatState::fp32_gradients() {
  if (matrices_in_bf16_) {
    for (const ParamInfo& tensor : layout_.tensors)
      if (is_matrix(tensor))
        HSRING_CUDA_CHECK(gpu::launch_bf16_to_float(grads_bf16(tensor.offset), tensor.size,
                                                    grads(tensor.offset), stream_));
    matrices_in_bf16_ = false;
  }
  return grads();
}

void FlatState::zero_gradients() {
  HSRING_CUDA_CHECK(cudaMemsetAsync(grads_.data(), 0, grads_.size(), stream_));
  matrices_in_bf16_ = false;
}

void FlatState::zero_vector_gradients() {
  for (const ParamInfo& tensor : layout_.tensors)
    if (!is_matrix(tensor))
      HSRING_CUDA_CHECK(
          cudaMemsetAsync(grads(tensor.offset), 0, tensor.size * sizeof(float), stream_));
}

void FlatState::scale_gradients(float factor) {
  HSRING_CUDA_CHECK(launch_scale(fp32_gradients(), total_, factor, stream_));
}

double FlatState::squared_norm() {
  // Each launch's partials in a slot of its own, summed on the host in one fixed order.
  auto* partials = norm_partials_.as<double>();
  std::vector<uint32_t> counts;
  const auto sum = [&](const auto* values, size_t n) {
    HSRING_CUDA_CHECK(
        launch_sum_squares(values, n, partials + counts.size() * kNormPartials, stream_));
    counts.push_back(sum_squares_blocks(n));
  };
  if (matrices_in_bf16_) {
    sum(grads_bf16(), total_);  // zeros where no matrix is
    for (const ParamInfo& tensor : layout_.tensors)
      if (!is_matrix(tensor)) sum(grads(tensor.offset), tensor.size);
  } else {
    sum(grads(), total_);
  }
  HSRING_CUDA_CHECK(cudaMemcpyAsync(norm_partials_host_.data(), norm_partials_.data(),
                                    counts.size() * kNormPartials * sizeof(double),
                                    cudaMemcpyDeviceToHost, stream_));
  HSRING_CUDA_CHECK(cudaStreamSynchronize(stream_));
  double squares = 0;
  for (size_t slot = 0; slot < counts.size(); ++slot)
    for (uint32_t i = 0; i < counts[slot]; ++i)
      squares += norm_partials_host_.as<double>()[slot * kNormPartials + i];
  return squares;
}

UpdateStats FlatState::apply_gradients() {
  const AdamWOptions& o = optimizer_;
  UpdateStats stats;
  stats.grad_norm = std::sqrt(squared_norm());
  stats.step = step_;
  if (!std::isfinite(stats.grad_norm)) {
    stats.skipped = true;
    return stats;
  }
  // The factors are the same for every tensor but for weight decay: two sets, once.
  const AdamWStep decayed = adamw_step(o, step_, stats.grad_norm, true);
  const AdamWStep plain = adamw_step(o, step_, stats.grad_norm, false);
  for (const ParamInfo& tensor : layout_.tensors) {
    const AdamWStep& update = tensor.weight_decay ? decayed : plain;
    const auto adamw = [&](const auto* gradients) {
      return launch_adamw(
          params(tensor.offset), gradients, m_.as<float>() + tensor.offset,
          v_.as<float>() + tensor.offset, tensor.size, update, stream_,
          params_bf16_.size() ? params_bf16_.as<uint16_t>() + tensor.offset : nullptr);
    };
    HSRING_CUDA_CHECK(matrices_in_bf16_ && is_matrix(tensor) ? adamw(grads_bf16(tensor.offset))
                                                             : adamw(grads(tensor.offset)));
  }
  stats.clipped = plain.clip < 1.0;
  stats.lr = plain.lr;
  stats.step = ++step_;
  return stats;
}

std::span<float> FlatState::host_gradients() {
  (void)fp32_gradients();
  host_gradients_ = download(grads_, stream_);
  return host_gradients_;
}

void FlatState::host_gradients_changed() {
  HSRING_CUDA_CHECK(cudaMemcpyAsync(grads_.data(), host_gradients_.data(), grads_.size(),
                                    cudaMemcpyHostToDevice, stream_));
  HSRING_CUDA_CHECK(cudaStreamSynchronize(stream_));
  matrices_in_bf16_ = false;
}

std::vector<float> FlatState::download_params() const { return download(params_, stream_); }
std::vector<float> FlatState::download_gradients() {
  (void)fp32_gradients();
  return download(grads_, stream_);
}

TrainerState FlatState::state() const {
  return TrainerState{download(params_, stream_), download(m_, stream_), download(v_, stream_),
                      step_};
}

void FlatState::load_state(const TrainerState& state) {
  check_state_sizes(state, total_);
  HSRING_CUDA_CHECK(cudaMemcpyAsync(params_.data(), state.params.data(), params_.size(),
                                    cudaMemcpyHostToDevice, stream_));
  HSRING_CUDA_CHECK(cudaMemcpyAsync(m_.data(), state.first_moment.data(), m_.size(),
                                    cudaMemcpyHostToDevice, stream_));
  HSRING_CUDA_CHECK(cudaMemcpyAsync(v_.data(), state.second_moment.data(), v_.size(),
                                    cudaMemcpyHostToDevice, stream_));
  if (params_bf16_.size()) keep_bf16_params();  // the copy follows the loaded weights
  HSRING_CUDA_CHECK(cudaStreamSynchronize(stream_));
  step_ = state.step;
}

}  // namespace hsring::train
