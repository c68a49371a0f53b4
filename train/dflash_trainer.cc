#include "train/dflash_trainer.h"

#include <algorithm>
#include <stdexcept>

#include "common/error.h"
#include "common/ignore_label.h"
#include "common/random.h"
#include "train/dflash_blocks.h"

namespace hsring::train {

const char* to_string(DflashLabels labels) {
  return labels == DflashLabels::kData ? "data" : "target";
}

DflashLabels parse_dflash_labels(const std::string& text) {
  if (text == "data") return DflashLabels::kData;
  if (text == "target") return DflashLabels::kTarget;
  throw Error(Errc::kUsage, "--labels " + text +
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

void build_dflash_labels(const DrafterBatch& batch, DflashLabels labels,
                         std::vector<int32_t>& out) {
  if (labels == DflashLabels::kTarget) {
    out.assign(batch.labels.begin(), batch.labels.end());
    return;
  }
  // Row t is scored against the token after it; a document's last row has none, and a row
  // the target marked ignored (its next token is masked out by the loss mask) has none.
  out.assign(batch.rows(), kIgnoreLabel);
  for (size_t d = 0; d + 1 < batch.doc_offsets.size(); ++d) {
    for (int32_t t = batch.doc_offsets[d]; t + 1 < batch.doc_offsets[d + 1]; ++t)
      if (batch.labels[size_t(t)] >= 0) out[size_t(t)] = batch.tokens[size_t(t) + 1];
  }
}

std::vector<int32_t> dflash_step_anchors(const DrafterBatch& batch, std::span<const int32_t> labels,
                                         const DflashConfig& config, size_t anchors, uint64_t seed,
                                         uint64_t optimizer_step) {
  const size_t count = anchors ? anchors : default_anchor_count(batch.rows());
  const uint64_t anchor_seed = mix64(seed ^ mix64(optimizer_step + 0x5DF1A5ull));
  return sample_anchors(batch.doc_offsets, labels, config.block_size, count, anchor_seed);
}

LossStats dflash_loss_stats(const DflashStats& s, size_t tokens) {
  LossStats stats;
  stats.loss = s.loss;
  stats.tokens = tokens;
  stats.counted = s.counted;
  stats.agreed = s.agreed;
  stats.agreement = s.counted ? double(s.agreed) / double(s.counted) : 0;
  stats.acceptance_length = s.acceptance_length;
  stats.accepted_at = s.accepted_at;
  return stats;
}

LossStats DflashTrainer::compute_gradients(const DrafterBatch& batch) {
  build_dflash_labels(batch, options_.labels, labels_);
  anchors_ = dflash_step_anchors(batch, labels_, options_.model, options_.anchors, options_.seed,
                                 optimizer_.step());
  const DflashBatch blocks = dflash_batch(batch, labels_, anchors_);
  model_.zero_grads();
  last_ = anchors_.empty() ? DflashStats{} : model_.forward_backward(blocks);
  return dflash_loss_stats(last_, batch.rows());
}

std::optional<LossStats> DflashTrainer::evaluate_held_out(const DrafterBatch& batch) {
  constexpr uint64_t kEvaluationSeedSalt = 0x4556414C00000001ull;  // "EVAL"
  build_dflash_labels(batch, options_.labels, eval_labels_);
  eval_anchors_ = dflash_step_anchors(batch, eval_labels_, options_.model, options_.anchors,
                                      options_.seed ^ kEvaluationSeedSalt, 0);
  const DflashBatch blocks = dflash_batch(batch, eval_labels_, eval_anchors_);
  const DflashStats stats = eval_anchors_.empty() ? DflashStats{} : model_.forward(blocks);
  return dflash_loss_stats(stats, batch.rows());
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
