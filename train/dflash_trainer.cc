#include "train/dflash_trainer.h"

#include <algorithm>
#include <stdexcept>

#include "common/random.h"
#include "model/model_error.h"
#include "train/dflash_blocks.h"

namespace hsring::train {

const char* to_string(DflashLabels labels) {
  return labels == DflashLabels::kData ? "data" : "target";
}

DflashLabels parse_dflash_labels(const std::string& text) {
  if (text == "data") return DflashLabels::kData;
  if (text == "target") return DflashLabels::kTarget;
  throw std::invalid_argument("--labels " + text +
                              ": expected data (the data's next token) or target (the "
                              "target's greedy next token)");
}

DflashTrainer::DflashTrainer(DflashTrainerOptions options)
    : options_(std::move(options)),
      model_(options_.model,
             DflashTargetWeights{options_.embed, options_.lm_head.empty()
                                                     ? std::span<const float>(options_.embed)
                                                     : std::span<const float>(options_.lm_head)},
             options_.seed, options_.threads),
      optimizer_(options_.optimizer, model_.layout()) {}

std::string DflashTrainer::describe() const {
  return train::describe(model_.config()) + ", labels " + to_string(options_.labels);
}

void DflashTrainer::build_labels(const DrafterBatch& batch) {
  if (options_.labels == DflashLabels::kTarget) {
    labels_.assign(batch.labels.begin(), batch.labels.end());
    return;
  }
  // Row t is scored against the token after it; a document's last row has none, and a row
  // the target marked ignored (its next token is masked out by the loss mask) has none.
  labels_.assign(batch.rows(), kIgnoreLabel);
  for (size_t d = 0; d + 1 < batch.doc_offsets.size(); ++d) {
    for (int32_t t = batch.doc_offsets[d]; t + 1 < batch.doc_offsets[d + 1]; ++t)
      if (batch.labels[size_t(t)] >= 0) labels_[size_t(t)] = batch.tokens[size_t(t) + 1];
  }
}

LossStats DflashTrainer::compute_gradients(const DrafterBatch& batch) {
  build_labels(batch);
  const size_t count = options_.anchors ? options_.anchors : default_anchor_count(batch.rows());
  // A pure function of (seed, step): a batch produced again after a crash gets the anchors
  // it would have had at that step.
  const uint64_t anchor_seed = mix64(options_.seed ^ mix64(optimizer_.step() + 0x5DF1A5ull));
  anchors_ =
      sample_anchors(batch.doc_offsets, labels_, options_.model.block_size, count, anchor_seed);
  const DflashBatch blocks{batch.features,    batch.tokens, batch.positions,
                           batch.doc_offsets, labels_,      anchors_};
  model_.zero_grads();
  last_ = anchors_.empty() ? DflashStats{} : model_.forward_backward(blocks);
  LossStats stats;
  stats.loss = last_.loss;
  stats.tokens = batch.rows();
  stats.counted = last_.counted;
  stats.agreed = last_.agreed;
  stats.agreement = last_.counted ? double(last_.agreed) / double(last_.counted) : 0;
  stats.acceptance_length = last_.acceptance_length;
  return stats;
}

void DflashTrainer::scale_gradients(float factor) {
  for (float& g : model_.grads()) g *= factor;
}

UpdateStats DflashTrainer::apply_gradients() {
  return optimizer_.update(model_.params(), model_.grads());
}

TrainerState DflashTrainer::state() const { return capture_state(model_.params(), optimizer_); }

void DflashTrainer::load_state(const TrainerState& state) {
  restore_state(state, model_.params(), optimizer_);
}

}  // namespace hsring::train
