// Where a training drafter's steps run, and how a claimed slot's batch gets there: on the
// CPU (the batch widened to fp32 in host memory, train/same_position_trainer.h) or on a GPU (the
// slot's bf16 payload DMAed to the device, train/cuda_same_position_trainer.h;
// gpu_training_backend.h). The training loop (training_drafter.h) is the same for both.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "drafter_proc/gradient_group.h"
#include "shm/slot_view.h"
#include "train/dflash_trainer.h"
#include "train/drafter_trainer.h"
#include "train/same_position_trainer.h"
#include "worker/batch_consumer.h"

namespace hsring {

class TrainingBackend {
 public:
  virtual ~TrainingBackend() = default;

  virtual train::DrafterTrainer& trainer() = 0;
  // Copies the claimed batch out of the ring (REQUIRES: its slot is held READING and
  // check_model_metadata() passed); when it returns nothing more is read from the slot, so
  // it can be released before the step. Throws on a device failure.
  virtual void copy_batch(const SlotView& batch) = 0;
  virtual uint32_t batch_tokens() const = 0;
  // Gradients of the last copied batch's mean loss.
  virtual train::LossStats compute_gradients() = 0;
  // "" when the last copied batch's hidden states are all finite, or the backend cannot
  // tell (a GPU's copy is on the device); else the first element that is not. Called only
  // to explain a loss that is not finite.
  virtual std::string features_problem() const { return ""; }
  // For the log: "on the CPU, 2 threads" / "on GPU 1 (NVIDIA H200), bf16 products".
  virtual std::string describe() const = 0;
  // The group this member trains one model in: the shared-memory exchange beside the
  // ring unless the backend has its own (NCCL between GPUs). Throws Error for a segment
  // that cannot be used.
  virtual std::unique_ptr<GradientGroup> join_group(const GroupJoin& join);
  // How this backend's consumer polls an early-published slot's CUDA event (a GPU's
  // CopyEventPoller); empty: it reads such slots once their producer settles the ticket.
  virtual BatchConsumer::CopyPoller copy_poller() { return {}; }
};

// Builds the backend of one drafter process for a ring; throws on bad setup.
using TrainingBackendFactory = std::function<std::unique_ptr<TrainingBackend>(
    const train::SamePositionTrainerOptions&, Ring&)>;
using DflashBackendFactory =
    std::function<std::unique_ptr<TrainingBackend>(const train::DflashTrainerOptions&, Ring&)>;

std::unique_ptr<TrainingBackend> make_cpu_training_backend(
    const train::SamePositionTrainerOptions& options);
// The DFlash objective's trainer on the CPU (a GPU's: gpu_training_backend.h).
std::unique_ptr<TrainingBackend> make_cpu_dflash_backend(train::DflashTrainerOptions options);

}  // namespace hsring
