#include "drafter_proc/training_checkpoint.h"

#include "common/error.h"

namespace hsring {

namespace {

constexpr char kShapeKey[] = "drafter.shape";
constexpr char kBatchesKey[] = "data.batches_trained";

checkpoint::Tensor tensor_of(const std::string& name, const train::ParamInfo& info,
                             std::span<const float> flat) {
  const auto first = flat.begin() + ptrdiff_t(info.offset);
  return checkpoint::Tensor{name, info.shape,
                            std::vector<float>(first, first + ptrdiff_t(info.size))};
}

[[noreturn]] void refuse(const std::string& why) {
  throw Error(Errc::kCheckpoint, "checkpoint", "cannot resume from it: " + why);
}

void copy_into(const checkpoint::Checkpoint& saved, const std::string& name,
               const train::ParamInfo& info, std::span<float> flat) {
  const checkpoint::Tensor* t = saved.find(name);
  if (t == nullptr) refuse("it has no tensor '" + name + "'");
  if (t->shape != info.shape || t->data.size() != info.size)
    refuse("tensor '" + name + "' has another shape than this drafter's");
  std::copy(t->data.begin(), t->data.end(), flat.begin() + ptrdiff_t(info.offset));
}

}  // namespace

checkpoint::Checkpoint save_training(const train::DrafterTrainer& trainer,
                                     const TrainingPosition& position) {
  const train::TrainerState state = trainer.state();
  checkpoint::Checkpoint c;
  c.step = state.step;
  c.metadata[kShapeKey] = trainer.describe();
  c.set_u64(kNextDataBatchKey, position.next_data_batch);
  c.set_u64(kBatchesKey, position.batches_trained);
  for (const train::ParamInfo& info : trainer.layout().tensors) {
    c.tensors.push_back(tensor_of(info.name, info, state.params));
    c.tensors.push_back(tensor_of("optimizer.m." + info.name, info, state.first_moment));
    c.tensors.push_back(tensor_of("optimizer.v." + info.name, info, state.second_moment));
  }
  return c;
}

TrainingPosition restore_training(const checkpoint::Checkpoint& saved,
                                  train::DrafterTrainer& trainer) {
  const std::string shape = trainer.describe();
  const auto it = saved.metadata.find(kShapeKey);
  if (it == saved.metadata.end()) refuse("it does not say which drafter shape it holds");
  if (it->second != shape)
    refuse("it holds a drafter of shape '" + it->second + "', this run trains '" + shape + "'");
  // Gaps between tensors stay zero (train/param_layout.h).
  const size_t total = trainer.layout().total;
  train::TrainerState state{std::vector<float>(total, 0.0f), std::vector<float>(total, 0.0f),
                            std::vector<float>(total, 0.0f), saved.step};
  for (const train::ParamInfo& info : trainer.layout().tensors) {
    copy_into(saved, info.name, info, state.params);
    copy_into(saved, "optimizer.m." + info.name, info, state.first_moment);
    copy_into(saved, "optimizer.v." + info.name, info, state.second_moment);
  }
  trainer.load_state(state);
  TrainingPosition position;
  position.next_data_batch = saved.get_u64(kNextDataBatchKey).value_or(0);
  position.batches_trained = saved.get_u64(kBatchesKey).value_or(0);
  return position;
}

std::vector<checkpoint::Tensor> drafter_weights(const train::DrafterTrainer& trainer) {
  const train::TrainerState state = trainer.state();
  std::vector<checkpoint::Tensor> out;
  for (const train::ParamInfo& info : trainer.layout().tensors)
    out.push_back(tensor_of(info.name, info, state.params));
  return out;
}

}  // namespace hsring
