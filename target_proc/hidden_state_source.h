// What a target runs per batch: which tokens batch X holds (its plan) and the forward
// that yields their captured hidden states. The synthetic source makes both up from the
// batch id; the model source (model_source.h) reads token shards and runs the target
// model. Both are pure functions of the batch id: a re-produced batch is identical.
#pragma once

#include <cstdint>

#include "shm/ring.h"
#include "worker/synthetic_batch.h"

namespace hsring {

// The metadata of batch X (token and document counts, length bucket), known before its
// content is produced: what a slot's header carries.
class BatchPlanner {
 public:
  virtual ~BatchPlanner() = default;
  virtual BatchPlan plan(uint64_t batch_id) = 0;
};

// Batches whose shape is plan_batch(id, shape).
class SyntheticPlanner final : public BatchPlanner {
 public:
  explicit SyntheticPlanner(const RingShape& shape) : shape_(shape) {}
  BatchPlan plan(uint64_t batch_id) override { return plan_batch(batch_id, shape_); }

 private:
  RingShape shape_;
};

class HiddenStateSource : public BatchPlanner {
 public:
  // Writes batch `plan` (hidden states and token metadata) into slot `slot` of `ring`.
  // Must be a pure function of plan.batch_id: a re-produced batch is identical.
  virtual void produce(const BatchPlan& plan, const Ring& ring, uint32_t slot) = 0;
};

// Hidden states that are a deterministic function of (batch, layer, token, dim).
class SyntheticSource final : public HiddenStateSource {
 public:
  explicit SyntheticSource(const RingShape& shape) : planner_(shape) {}
  BatchPlan plan(uint64_t batch_id) override { return planner_.plan(batch_id); }
  void produce(const BatchPlan& plan, const Ring& ring, uint32_t slot) override {
    fill_synthetic_batch(ring, slot, plan);
  }

 private:
  SyntheticPlanner planner_;
};

}  // namespace hsring
