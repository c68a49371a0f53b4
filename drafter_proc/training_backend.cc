#include "drafter_proc/training_backend.h"

#include "drafter_proc/slot_batch.h"
#include "shm/ring.h"

namespace hsring {

namespace {

class CpuTrainingBackend final : public TrainingBackend {
 public:
  explicit CpuTrainingBackend(const train::TrainerOptions& options) : trainer_(options) {}

  train::DrafterTrainer& trainer() override { return trainer_; }
  void copy_batch(const Ring& ring, uint32_t slot) override { batch_.copy_from(ring, slot); }
  uint32_t batch_tokens() const override { return batch_.tokens(); }
  train::LossStats compute_gradients() override { return trainer_.compute_gradients(batch_.view()); }
  std::string features_problem() const override {
    return batch_.features_problem(trainer_.config().num_captured);
  }
  std::string describe() const override {
    return "on the CPU, " + std::to_string(trainer_.model().threads()) + " thread(s)";
  }

 private:
  train::Trainer trainer_;
  SlotBatch batch_;
};

}  // namespace

std::unique_ptr<GradientGroup> TrainingBackend::join_group(const GroupJoin& join) {
  if (join.spans_machines())
    throw std::runtime_error("drafters on several machines all-reduce with NCCL, which this "
                             "drafter cannot use (CPU mode, or a build without NCCL): run GPU "
                             "drafters from a CUDA build with NCCL, or train on one machine");
  return open_shared_memory_group(join, trainer());
}

std::unique_ptr<TrainingBackend> make_cpu_training_backend(const train::TrainerOptions& options) {
  return std::make_unique<CpuTrainingBackend>(options);
}

}  // namespace hsring
