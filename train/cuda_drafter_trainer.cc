#include "train/cuda_drafter_trainer.h"

#include "train/cuda_flat_state.h"

namespace hsring::train {

float* CudaDrafterTrainer::device_gradients() { return flat_state().fp32_gradients(); }

void CudaDrafterTrainer::scale_gradients(float factor) { flat_state().scale_gradients(factor); }

UpdateStats CudaDrafterTrainer::apply_gradients() { return flat_state().apply_gradients(); }

uint64_t CudaDrafterTrainer::optimizer_step() const { return flat_state().step(); }

std::span<float> CudaDrafterTrainer::host_gradients() { return flat_state().host_gradients(); }

void CudaDrafterTrainer::host_gradients_changed() { flat_state().host_gradients_changed(); }

TrainerState CudaDrafterTrainer::state() const { return flat_state().state(); }

void CudaDrafterTrainer::load_state(const TrainerState& state) { flat_state().load_state(state); }

std::vector<float> CudaDrafterTrainer::params() const { return flat_state().download_params(); }

std::vector<float> CudaDrafterTrainer::gradients() const {
  return flat_state().download_gradients();
}

}  // namespace hsring::train
