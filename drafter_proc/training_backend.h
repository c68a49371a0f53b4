// Where a training drafter's steps run, and how a claimed slot's batch gets there: on the
// CPU (the batch widened to fp32 in host memory, train/trainer.h) or on a GPU (the slot's
// bf16 payload DMAed to the device, train/cuda_trainer.h; gpu_training_backend.h). The
// training loop (training_drafter.h) is the same for both.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "drafter_proc/gradient_group.h"
#include "train/drafter_trainer.h"
#include "train/trainer.h"

namespace hsring {

class Ring;

// What a member needs to join its drafter group. On one machine the group is the ring's
// drafters; across machines (--nnodes) every node's, ranked node by node.
struct GroupJoin {
  Ring& ring;
  uint32_t members = 0;           // >= 2, on every machine together
  uint32_t rank = 0;              // node rank * local_members + the drafter index
  uint32_t local_members = 0;     // the drafters on this machine's ring
  uint32_t first_local_rank = 0;  // the rank of this machine's drafter 0
  uint32_t epoch = 0;             // this process's incarnation
  uint64_t first_step = 0;        // the loaded checkpoint's step + 1
  std::string rendezvous_dir;     // across machines: the shared folder (group_files.h)
  PeerWatch peers;                // this machine's drafters, by drafter index
  std::function<bool()> keep_waiting;

  bool spans_machines() const { return local_members != members; }
};

class TrainingBackend {
 public:
  virtual ~TrainingBackend() = default;

  virtual train::DrafterTrainer& trainer() = 0;
  // Copies the batch in `slot` out of the ring (REQUIRES: the slot is held READING and
  // check_model_metadata() passed); when it returns nothing more is read from the slot, so
  // it can be released before the step. Throws on a device failure.
  virtual void copy_batch(const Ring& ring, uint32_t slot) = 0;
  virtual uint32_t batch_tokens() const = 0;
  // Gradients of the last copied batch's mean loss.
  virtual train::LossStats compute_gradients() = 0;
  // For the log: "on the CPU, 2 threads" / "on GPU 1 (NVIDIA H200), bf16 products".
  virtual std::string describe() const = 0;
  // The group this member trains one model in: the shared-memory exchange beside the
  // ring unless the backend has its own (NCCL between GPUs). Throws std::runtime_error
  // for a segment that cannot be used.
  virtual std::unique_ptr<GradientGroup> join_group(const GroupJoin& join);
};

// Builds the backend of one drafter process for a ring; throws on bad setup.
using TrainingBackendFactory =
    std::function<std::unique_ptr<TrainingBackend>(const train::TrainerOptions&, Ring&)>;

std::unique_ptr<TrainingBackend> make_cpu_training_backend(const train::TrainerOptions& options);

}  // namespace hsring
