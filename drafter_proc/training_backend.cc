#include "drafter_proc/training_backend.h"

#include <fmt/format.h>

#include "common/error.h"
#include "drafter_proc/slot_batch.h"
#include "shm/ring.h"

namespace hsring {

namespace {

// Either objective's CPU trainer over the batch widened to fp32 in host memory.
class CpuTrainingBackend final : public TrainingBackend {
 public:
  CpuTrainingBackend(std::unique_ptr<train::DrafterTrainer> trainer, uint32_t threads,
                     uint32_t num_captured)
      : trainer_(std::move(trainer)), threads_(threads), num_captured_(num_captured) {}

  train::DrafterTrainer& trainer() override { return *trainer_; }
  void copy_batch(const SlotView& batch) override { batch_.copy_from(batch); }
  uint32_t batch_tokens() const override { return batch_.tokens(); }
  train::LossStats compute_gradients() override {
    return trainer_->compute_gradients(batch_.view());
  }
  std::string features_problem() const override { return batch_.features_problem(num_captured_); }
  std::string describe() const override {
    return fmt::format("on the CPU, {} thread(s)", threads_);
  }

 private:
  std::unique_ptr<train::DrafterTrainer> trainer_;
  uint32_t threads_;
  uint32_t num_captured_;  // K, for the features check
  SlotBatch batch_;
};

}  // namespace

std::unique_ptr<GradientGroup> TrainingBackend::join_group(const GroupJoin& join) {
  if (join.spans_machines())
    throw Error(Errc::kGroup,
                "drafters on several machines all-reduce with NCCL, which this "
                "drafter cannot use (CPU mode, or a build without NCCL): run GPU "
                "drafters from a CUDA build with NCCL, or train on one machine");
  return open_shared_memory_group(join, trainer());
}

std::unique_ptr<TrainingBackend> make_cpu_training_backend(
    const train::SamePositionTrainerOptions& options) {
  auto trainer = std::make_unique<train::SamePositionTrainer>(options);
  const uint32_t threads = trainer->model().threads();
  const uint32_t k = options.model.num_captured;
  return std::make_unique<CpuTrainingBackend>(std::move(trainer), threads, k);
}

std::unique_ptr<TrainingBackend> make_cpu_dflash_backend(train::DflashTrainerOptions options) {
  const uint32_t k = options.model.num_captured;
  auto trainer = std::make_unique<train::DflashTrainer>(std::move(options));
  const uint32_t threads = trainer->model().threads();
  return std::make_unique<CpuTrainingBackend>(std::move(trainer), threads, k);
}

}  // namespace hsring
