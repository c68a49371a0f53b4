#include "train/trainer.h"

#include "common/clock.h"

namespace hsring::train {

Trainer::Trainer(TrainerOptions options)
    : model_(options.model, DrafterInit{options.seed, options.lm_head_init}, options.threads),
      optimizer_(options.optimizer, model_.layout()) {}

LossStats Trainer::compute_gradients(const DrafterBatch& batch) {
  model_.zero_grads();
  return model_.forward_backward(batch);
}

void Trainer::scale_gradients(float factor) {
  for (float& g : model_.grads()) g *= factor;
}

UpdateStats Trainer::apply_gradients() {
  return optimizer_.update(model_.params(), model_.grads());
}

StepStats Trainer::step(const DrafterBatch& batch) {
  const uint64_t start = monotonic_ns();
  const LossStats loss = compute_gradients(batch);
  const UpdateStats update = apply_gradients();
  const double seconds = double(monotonic_ns() - start) * 1e-9;
  StepStats s;
  s.loss = loss.loss;
  s.agreement = loss.agreement;
  s.tokens = loss.tokens;
  s.counted = loss.counted;
  s.grad_norm = update.grad_norm;
  s.lr = update.lr;
  s.step = update.step;
  s.skipped = update.skipped;
  s.step_ms = seconds * 1e3;
  s.tokens_per_s = seconds > 0 ? double(loss.tokens) / seconds : 0;
  return s;
}

}  // namespace hsring::train
