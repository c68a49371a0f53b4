// What a target runs per batch: the forward that yields captured hidden states. CPU mode
// uses the synthetic source; the real transformer implements the same interface.
#pragma once

#include <cstdint>

#include "common/synthetic_batch.h"
#include "shm/ring.h"

namespace hsring {

class HiddenStateSource {
 public:
  virtual ~HiddenStateSource() = default;
  // Writes batch `plan` (hidden states and token metadata) into slot `slot` of `ring`.
  // Must be a pure function of plan.batch_id: a re-produced batch is identical.
  virtual void produce(const BatchPlan& plan, const Ring& ring, uint32_t slot) = 0;
};

// Hidden states that are a deterministic function of (batch, layer, token, dim).
class SyntheticSource final : public HiddenStateSource {
 public:
  void produce(const BatchPlan& plan, const Ring& ring, uint32_t slot) override {
    fill_synthetic_batch(ring, slot, plan);
  }
};

}  // namespace hsring
