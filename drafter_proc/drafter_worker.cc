#include "drafter_proc/drafter_worker.h"

#include <thread>

#include "common/log.h"
#include "common/signals.h"
#include "shm/consumer.h"
#include "shm/ledger.h"
#include "shm/stage_timer.h"
#include "worker/model_batch_check.h"
#include "worker/synthetic_batch.h"
#include "worker/worker_main.h"

namespace hsring {

namespace {
constexpr auto kClaimSlice = std::chrono::milliseconds(100);
constexpr uint64_t kTornLogLimit = 10;
}  // namespace

DrafterWorker::DrafterWorker(WorkerSession& session, DrafterOptions options)
    : session_(session), ring_(session.ring()), options_(options) {}

bool drafter_keeps_running(const Ring& ring) {
  return !stop_requested() && !launcher_gone() &&
         ring.header().run_state.load(std::memory_order_acquire) == uint32_t(RunState::kRunning);
}

bool DrafterWorker::keep_running() const { return drafter_keeps_running(ring_); }

void DrafterWorker::consume(SlotClaim& claim) {
  ProcessEntry& entry = session_.entry();
  const SlotHeader& slot = ring_.slot(claim.index);
  const uint64_t batch_id = slot.batch_id.load(std::memory_order_relaxed);
  std::string problem;
  {
    StageTimer timer(entry, Stage::kDrafterVerify);
    problem = ring_.shape().content == PayloadContent::kModel
                  ? check_model_batch(ring_, claim.index)
                  : verify_synthetic_batch(ring_, claim.index);
  }
  if (!problem.empty()) {
    ledger_mark_torn(ring_, batch_id);
    entry.torn.fetch_add(1, std::memory_order_relaxed);
    if (torn_logged_++ < kTornLogLimit)
      log_line("TORN batch in slot " + std::to_string(claim.index) + ": " + problem);
  }
  if (options_.step_ms > 0) {
    StageTimer timer(entry, Stage::kDrafterStep);
    std::this_thread::sleep_for(std::chrono::microseconds(int64_t(options_.step_ms * 1000)));
  }
  const RingShape& s = ring_.shape();
  const uint32_t tokens = slot.token_count.load(std::memory_order_relaxed);
  entry.batches.fetch_add(1, std::memory_order_relaxed);
  entry.tokens.fetch_add(tokens, std::memory_order_relaxed);
  entry.hs_bytes.fetch_add(uint64_t(tokens) * s.hidden_size * s.num_layers * dtype_size(s.dtype),
                           std::memory_order_relaxed);
}

int DrafterWorker::run() {
  const Identity self = session_.identity();
  if (session_.recovered_at_start().total() > 0) {
    log_line("returned " + std::to_string(session_.recovered_at_start().total()) +
             " slot(s) of the previous epoch");
  }
  session_.set_state(ProcessState::kRunning);
  uint64_t rng = options_.seed ^ (uint64_t(self.index) << 32) ^ self.epoch;
  while (keep_running()) {
    session_.heartbeat();
    StageTimer wait_timer(session_.entry(), Stage::kDrafterClaimWait);
    auto claim = claim_ready_slot(ring_, self, ring_.shape().hs_min_ready, kClaimSlice, rng);
    if (!claim) continue;
    wait_timer.stop();
    consume(*claim);
    if (!release_consumed(ring_, *claim)) {
      log_line("lost ownership of slot " + std::to_string(claim->index) + "; exiting");
      return kExitLostSlot;
    }
  }
  session_.set_state(ProcessState::kDraining);
  return kExitOk;
}

}  // namespace hsring
