#include "train/same_position_trainer.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/clock.h"
#include "common/error.h"

namespace hsring::train {

SamePositionTrainer::SamePositionTrainer(SamePositionTrainerOptions options)
    : model_(options.model, SamePositionInit{options.seed, options.lm_head_init}, options.threads),
      optimizer_(options.optimizer, model_.layout()) {}

LossStats SamePositionTrainer::compute_gradients(const DrafterBatch& batch) {
  model_.zero_grads();
  return model_.forward_backward(batch);
}

void SamePositionTrainer::scale_gradients(float factor) {
  for (float& g : model_.grads()) g *= factor;
}

UpdateStats SamePositionTrainer::apply_gradients() {
  return optimizer_.update(model_.params(), model_.grads());
}

TrainerState SamePositionTrainer::state() const {
  return capture_state(model_.params(), optimizer_);
}

void SamePositionTrainer::load_state(const TrainerState& state) {
  restore_state(state, model_.params(), optimizer_);
}

TrainerState capture_state(std::span<const float> params, const AdamW& optimizer) {
  TrainerState state;
  state.params.assign(params.begin(), params.end());
  state.first_moment.assign(optimizer.first_moment().begin(), optimizer.first_moment().end());
  state.second_moment.assign(optimizer.second_moment().begin(), optimizer.second_moment().end());
  state.step = optimizer.step();
  return state;
}

void restore_state(const TrainerState& state, std::span<float> params, AdamW& optimizer) {
  check_state_sizes(state, params.size());
  std::copy(state.params.begin(), state.params.end(), params.begin());
  std::copy(state.first_moment.begin(), state.first_moment.end(), optimizer.first_moment().begin());
  std::copy(state.second_moment.begin(), state.second_moment.end(),
            optimizer.second_moment().begin());
  optimizer.set_step(state.step);
}

StepStats DrafterTrainer::step(const DrafterBatch& batch) {
  const uint64_t start = monotonic_ns();
  const LossStats loss = compute_gradients(batch);
  const UpdateStats update = apply_gradients();
  return step_stats(loss, update, double(monotonic_ns() - start) * 1e-9);
}

StepStats DrafterTrainer::step_stats(const LossStats& loss, const UpdateStats& update,
                                     double seconds) {
  StepStats s;
  s.loss = loss.loss;
  s.agreement = loss.agreement;
  s.acceptance_length = loss.acceptance_length;
  s.tokens = loss.tokens;
  s.counted = loss.counted;
  s.grad_norm = update.grad_norm;
  s.lr = update.lr;
  s.step = update.step;
  s.skipped = update.skipped;
  s.step_ms = seconds * 1e3;
  s.tokens_per_s = seconds > 0 ? double(loss.tokens) / seconds : 0;
  s.accepted_at = loss.accepted_at;
  return s;
}

void check_state_sizes(const TrainerState& state, size_t total) {
  for (const std::vector<float>* buffer :
       {&state.params, &state.first_moment, &state.second_moment}) {
    if (buffer->size() != total)
      throw Error(Errc::kModel,
                  fmt::format("trainer state: a buffer of {} values, the drafter's layout has {}",
                              buffer->size(), total));
  }
}

}  // namespace hsring::train
