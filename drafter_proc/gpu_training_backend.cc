#include "drafter_proc/gpu_training_backend.h"

#include <fmt/format.h>

#include <stdexcept>

#include "common/error.h"
#include "drafter_proc/nccl_group.h"
#include "drafter_proc/slot_batch.h"
#include "drafter_proc/slot_dma.h"
#include "gpu/copy_events.h"
#include "gpu/cuda_handles.h"
#include "gpu/device.h"
#include "gpu/host_registration.h"
#include "gpu/memlock.h"
#include "shm/ring.h"
#include "train/cuda_dflash_trainer.h"
#include "train/cuda_same_position_trainer.h"

namespace hsring {

namespace {

// Either objective's CUDA trainer (train/cuda_drafter_trainer.h) fed by the slot's DMA.
class GpuTrainingBackend final : public TrainingBackend {
 public:
  GpuTrainingBackend(std::unique_ptr<train::CudaDrafterTrainer> trainer, Ring& ring, int gpu)
      : gpu_(gpu), trainer_(std::move(trainer)) {
    const RingShape& s = ring.shape();
    if (s.dtype != DType::kBF16)
      throw Error(Errc::kUsage, std::string("GPU training reads bf16 hidden states; this ring "
                                            "carries ") +
                                    to_string(s.dtype) + ": run with --dtype bf16");
    pinned_ = gpu::pin_ring_payload(ring);
    features_ = gpu::DeviceBuffer::allocate(uint64_t(s.max_tokens) * s.num_layers * s.hidden_size *
                                            sizeof(uint16_t));
  }

  ~GpuTrainingBackend() override {
    // Copies from the ring complete before the payload is unpinned.
    (void)cudaStreamSynchronize(trainer_->stream());
  }

  train::DrafterTrainer& trainer() override { return *trainer_; }

  void copy_batch(const SlotView& batch) override {
    batch_.copy_metadata(batch);
    cudaStream_t stream = trainer_->stream();
    if (gpu::CudaStatus s = enqueue_slot_features(batch, features_.data(), stream); !s.ok())
      throw gpu::cuda_error(s.code, s.message());
    // The step reads the copy on the same stream; the wait is for the slot's release.
    HSRING_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  uint32_t batch_tokens() const override { return batch_.tokens(); }

  train::LossStats compute_gradients() override {
    return trainer_->compute_gradients_bf16(features_.as<uint16_t>(), batch_.view());
  }

  std::string describe() const override {
    return "on " + gpu::describe_gpu(gpu_) + ", bf16 products on fp32 master weights";
  }

  BatchConsumer::CopyPoller copy_poller() override {
    return [this](const PendingCopy& pending) { return copy_events_.poll(pending); };
  }

#if HSRING_HAVE_NCCL
  std::unique_ptr<GradientGroup> join_group(const GroupJoin& join) override {
    return join_nccl_group(join, *trainer_);
  }
#endif

 private:
  int gpu_;
  std::unique_ptr<train::CudaDrafterTrainer> trainer_;
  std::unique_ptr<gpu::HostRegistration> pinned_;
  gpu::DeviceBuffer features_;        // bf16 [max_tokens, K*H]
  SlotBatch batch_;                   // the token metadata
  gpu::CopyEventPoller copy_events_;  // early-published slots' events (shm/copy_ticket.h)
};

// Builds a backend on `gpu`. The trainer's allocations run out of memory deep inside it
// ("cudaMalloc failed ... out of memory"); this says what did not fit and what to do.
template <class Trainer, class Options>
std::unique_ptr<TrainingBackend> make_backend(const Options& options, Ring& ring, int gpu) {
  gpu::use_gpu(gpu);
  try {
    return std::make_unique<GpuTrainingBackend>(std::make_unique<Trainer>(options), ring, gpu);
  } catch (const Error& e) {
    if (gpu::cuda_code(e) != cudaErrorMemoryAllocation) throw;
    (void)cudaGetLastError();
    size_t free = 0, total = 0;
    (void)cudaMemGetInfo(&free, &total);
    throw gpu::cuda_error(
        cudaErrorMemoryAllocation,
        fmt::format("the drafter does not fit {}: its weights, optimizer state and activations "
                    "ran out of memory with {} of {} free after they were released ({}). Other "
                    "processes on this GPU hold the rest, a target given the same GPU for one: "
                    "give the drafter a GPU of its own (--targets / --drafters), or a smaller "
                    "drafter or batch (--draft-layers, --max-tokens)",
                    gpu::describe_gpu(gpu), gpu::human_bytes(free), gpu::human_bytes(total),
                    e.what()));
  }
}

}  // namespace

std::unique_ptr<TrainingBackend> make_gpu_training_backend(
    const train::SamePositionTrainerOptions& options, Ring& ring, int gpu) {
  return make_backend<train::CudaSamePositionTrainer>(options, ring, gpu);
}

std::unique_ptr<TrainingBackend> make_gpu_dflash_backend(const train::DflashTrainerOptions& options,
                                                         Ring& ring, int gpu) {
  return make_backend<train::CudaDflashTrainer>(options, ring, gpu);
}

}  // namespace hsring
