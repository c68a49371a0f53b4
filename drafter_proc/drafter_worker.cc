#include "drafter_proc/drafter_worker.h"

#include <fmt/format.h>

#include <thread>

#include "common/log.h"
#include "common/signals.h"
#include "shm/stage_timer.h"
#include "worker/batch_consumer.h"
#include "worker/model_batch_check.h"
#include "worker/synthetic_batch.h"
#include "worker/worker_main.h"

namespace hsring {

namespace {
constexpr auto kClaimSlice = std::chrono::milliseconds(100);
}  // namespace

DrafterWorker::DrafterWorker(WorkerSession& session, DrafterOptions options)
    : session_(session), ring_(session.ring()), options_(options) {}

bool drafter_keeps_running(const Ring& ring) {
  return !stop_requested() && !launcher_gone() &&
         ring.header().run_state.load(std::memory_order_acquire) == uint32_t(RunState::kRunning);
}

bool DrafterWorker::keep_running() const { return drafter_keeps_running(ring_); }

void DrafterWorker::verify(BatchConsumer& consumer, const ClaimedBatch& batch) {
  ProcessEntry& entry = session_.entry();
  std::string problem;
  {
    StageTimer timer(entry, Stage::kDrafterVerify);
    problem = ring_.shape().content == PayloadContent::kModel
                  ? check_model_batch(ring_, batch.claim.index)
                  : verify_synthetic_batch(ring_, batch.claim.index);
  }
  if (!problem.empty()) consumer.mark_torn(batch, problem);
  if (options_.step_ms > 0) {
    StageTimer timer(entry, Stage::kDrafterStep);
    std::this_thread::sleep_for(std::chrono::microseconds(int64_t(options_.step_ms * 1000)));
  }
}

int DrafterWorker::run() {
  if (session_.recovered_at_start().total() > 0) {
    log_line(fmt::format("returned {} slot(s) of the previous epoch",
                         session_.recovered_at_start().total()));
  }
  session_.set_state(ProcessState::kRunning);
  BatchConsumer consumer(session_, options_.seed);
  ClaimedBatch batch;
  while (keep_running()) {
    session_.heartbeat();
    if (consumer.claim(kClaimSlice, batch) != SlotStatus::kOk) continue;
    verify(consumer, batch);
    // Counted as the header says, torn or not.
    const uint32_t tokens = batch.view.token_count();
    if (consumer.release(batch).lost()) return kExitLostSlot;
    consumer.account(tokens);
  }
  session_.set_state(ProcessState::kDraining);
  return kExitOk;
}

}  // namespace hsring
