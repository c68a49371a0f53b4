#include "target_proc/model_source.h"

#include "shm/ring.h"

namespace hsring {

ModelSource::ModelSource(std::unique_ptr<ModelSlotWriter> writer, const Ring& ring, uint32_t target,
                         const ModelSourceOptions& options)
    : writer_(std::move(writer)),
      tokens_(options, writer_->model().config(), ring.shape().max_tokens, target,
              ring.shape().num_targets) {}

void ModelSource::produce(const BatchPlan& plan, const Ring& ring, uint32_t slot) {
  const data::TokenBatch batch = tokens_.fetch(plan.batch_id);
  writer_->produce(PackedBatch{batch.tokens, batch.positions, batch.doc_offsets}, ring, slot);
  // The writer filled the target's greedy tokens: rows whose next token the loss mask
  // leaves out must not be trained on, whichever labels the drafter uses.
  data::mask_target_labels(batch, ring.labels(slot));
}

}  // namespace hsring
