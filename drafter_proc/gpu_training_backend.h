// A training drafter on a GPU: the ring's payload is pinned, each claimed slot's bf16
// layers are DMAed straight into the [T, K*H] device array the CUDA trainer reads
// (slot_dma.h), the slot is released once that copy completed, and the step runs on the
// device (fp32 master weights, bf16 products): the DFlash step (train/cuda_dflash_trainer.h)
// or the same-position one (train/cuda_same_position_trainer.h).
#pragma once

#include <memory>

#include "drafter_proc/training_backend.h"

namespace hsring {

// Uses GPU `gpu` (made current). Throws Error(kUsage) when the ring's dtype is not
// bf16, Error(kCuda) for a too-low memlock limit or a GPU that does
// not exist or lacks the memory, Error for a drafter shape the kernels do not take.
std::unique_ptr<TrainingBackend> make_gpu_training_backend(
    const train::SamePositionTrainerOptions& options, Ring& ring, int gpu);
// The same for the DFlash objective.
std::unique_ptr<TrainingBackend> make_gpu_dflash_backend(const train::DflashTrainerOptions& options,
                                                         Ring& ring, int gpu);

}  // namespace hsring
