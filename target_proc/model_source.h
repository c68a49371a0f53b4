// The CPU model target's source of batches: tokens from the TokenSource (token shards read
// through io_uring ahead of the forward, packed into batch X by the deterministic batch
// index), run through the target model, whose captured layers and greedy labels are
// written into the slot (target_proc/slot_writer.h). Batch X's tokens depend on the corpus, the
// packing options and X only, and the forward is bitwise deterministic, so a batch a
// restarted target produces again is identical to the one its predecessor began.
//
// Thread safety: none; the target thread owns the source.
#pragma once

#include <cstdint>
#include <memory>

#include "target_proc/hidden_state_source.h"
#include "target_proc/slot_writer.h"
#include "target_proc/token_source.h"

namespace hsring {

using ModelSourceOptions = TokenSourceOptions;

class ModelSource final : public HiddenStateSource {
 public:
  // The writer's model must match the ring (ModelSlotWriter checks). Throws as TokenSource.
  ModelSource(std::unique_ptr<ModelSlotWriter> writer, const Ring& ring, uint32_t target,
              const ModelSourceOptions& options);

  BatchPlan plan(uint64_t batch_id) override { return tokens_.plan(batch_id); }
  // Reads batch plan.batch_id's tokens, runs the forward and fills the slot. Throws
  // Error (a shard turned unreadable) or Error.
  void produce(const BatchPlan& plan, const Ring& ring, uint32_t slot) override;

  const data::ReaderStats* reader_stats() const { return tokens_.reader_stats(); }

 private:
  std::unique_ptr<ModelSlotWriter> writer_;
  TokenSource tokens_;
};

}  // namespace hsring
