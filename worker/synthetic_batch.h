// Synthetic batches whose every byte is a pure function of the batch id: what CPU-mode
// targets produce and verify-mode drafters check. A batch lost in a crash and produced
// again is identical, and any torn or misplaced byte is detectable.
#pragma once

#include <cstdint>
#include <string>

#include "common/synthetic_element.h"
#include "shm/ring_layout.h"

namespace hsring {

class Ring;

// Which batch ids a target owns: target t of T produces t, t+T, t+2T, ... in order.
struct BatchShard {
  uint32_t target = 0;
  uint32_t num_targets = 1;
  uint64_t batch_id(uint64_t seq) const { return seq * num_targets + target; }
  uint64_t seq_of(uint64_t batch_id) const { return batch_id / num_targets; }
  bool owns(uint64_t batch_id) const { return batch_id % num_targets == target; }
};

// The per-batch metadata implied by the id and the ring shape.
struct BatchPlan {
  uint64_t batch_id = 0;
  uint32_t token_count = 0;
  uint32_t num_docs = 0;
  uint32_t length_bucket = 0;
};
BatchPlan plan_batch(uint64_t batch_id, const RingShape& shape);

// Token id, position and label of token i; positions restart in each document.
int32_t synthetic_token(uint64_t batch_id, uint32_t token);

// Writes the whole batch (payload and metadata arrays) into slot `slot` of `ring`.
void fill_synthetic_batch(const Ring& ring, uint32_t slot, const BatchPlan& plan);
// Writes only the token metadata arrays (tokens, positions, document offsets, labels) of
// `plan`: what a GPU target writes from the host while its hidden states are copied.
void fill_synthetic_metadata(const Ring& ring, uint32_t slot, const BatchPlan& plan);

// Checks slot `slot` against the batch its header names. Returns "" when every element
// and every metadata field matches, else a description of the first mismatch.
std::string verify_synthetic_batch(const Ring& ring, uint32_t slot);
// The metadata half of verify_synthetic_batch (header fields and token arrays, not the
// hidden states): what a GPU drafter checks on the host while it verifies the hidden
// states on its GPU.
std::string verify_synthetic_metadata(const Ring& ring, uint32_t slot);

}  // namespace hsring
