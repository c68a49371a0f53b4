#include "worker/batch_consumer.h"

#include "common/log.h"
#include "shm/consumer.h"
#include "shm/ledger.h"
#include "shm/stage_timer.h"

namespace hsring {

BatchConsumer::BatchConsumer(WorkerSession& session, uint64_t seed)
    : session_(session), ring_(session.ring()) {
  const Identity self = session.identity();
  rng_ = seed ^ (uint64_t(self.index) << 32) ^ self.epoch;
}

SlotStatus BatchConsumer::claim(std::chrono::nanoseconds timeout, ClaimedBatch& batch) {
  if (ring_.header().run_state.load(std::memory_order_acquire) != uint32_t(RunState::kRunning))
    return SlotStatus::kStopping;
  StageTimer wait_timer(session_.entry(), Stage::kDrafterClaimWait);
  ClaimResult claim =
      claim_ready_slot(ring_, session_.identity(), ring_.shape().hs_min_ready, timeout, rng_);
  if (!claim) return claim.status();
  wait_timer.stop();
  batch.claim = *claim;
  batch.view = SlotView(ring_, claim->index);
  return SlotStatus::kOk;
}

void BatchConsumer::mark_torn(const ClaimedBatch& batch, const std::string& problem) {
  count_torn(batch.view.batch_id(), " in slot " + std::to_string(batch.claim.index), problem);
}

void BatchConsumer::mark_torn(uint64_t batch_id, const std::string& problem) {
  count_torn(batch_id, "", problem);
}

void BatchConsumer::count_torn(uint64_t batch_id, const std::string& where,
                               const std::string& problem) {
  ledger_mark_torn(ring_, batch_id);
  session_.entry().torn.fetch_add(1, std::memory_order_relaxed);  // relaxed: a statistic
  if (torn_++ < kTornLogLimit)
    log_line("TORN batch " + std::to_string(batch_id) + where + ": " + problem);
}

SlotResult BatchConsumer::release(ClaimedBatch& batch) {
  const SlotResult result = release_consumed(ring_, batch.claim);
  if (result.lost())
    log_line("lost ownership of slot " + std::to_string(batch.claim.index) +
             ": this drafter was presumed dead and the slot recovered; exiting");
  return result;
}

SlotResult BatchConsumer::return_unread(ClaimedBatch& batch) {
  return hsring::return_unread(ring_, batch.claim);
}

uint64_t BatchConsumer::account(uint32_t tokens) {
  const RingShape& s = ring_.shape();
  ProcessEntry& entry = session_.entry();
  // Relaxed: statistics for status and summaries, with no ordering duties.
  const uint64_t before = entry.batches.fetch_add(1, std::memory_order_relaxed);
  entry.tokens.fetch_add(tokens, std::memory_order_relaxed);
  entry.hs_bytes.fetch_add(uint64_t(tokens) * s.hidden_size * s.num_layers * dtype_size(s.dtype),
                           std::memory_order_relaxed);
  return before;
}

}  // namespace hsring
