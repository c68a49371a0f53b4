#include "target_proc/target_worker.h"

#include <algorithm>
#include <thread>

#include "common/clock.h"
#include "common/log.h"
#include "common/signals.h"
#include "common/worker_main.h"
#include "shm/producer.h"
#include "shm/stage_timer.h"

namespace hsring {

namespace {
constexpr auto kClaimSlice = std::chrono::milliseconds(100);
}

TargetWorker::TargetWorker(WorkerSession& session, HiddenStateSource& source,
                           TargetOptions options)
    : session_(session),
      ring_(session.ring()),
      source_(source),
      options_(options),
      shard_{session.identity().index, session.ring().shape().num_targets} {}

bool TargetWorker::keep_running() const {
  return !stop_requested() && !launcher_gone() &&
         ring_.header().run_state.load(std::memory_order_acquire) == uint32_t(RunState::kRunning);
}

void TargetWorker::pace() {
  if (options_.batches_per_second <= 0) return;
  const uint64_t period = uint64_t(1e9 / options_.batches_per_second);
  const uint64_t now = monotonic_ns();
  next_deadline_ns_ = std::max(next_deadline_ns_ + period, now);
  if (next_deadline_ns_ > now)
    std::this_thread::sleep_for(std::chrono::nanoseconds(next_deadline_ns_ - now));
}

bool TargetWorker::produce_and_publish(SlotClaim& claim, uint64_t batch_id) {
  ProcessEntry& entry = session_.entry();
  const BatchPlan plan = plan_batch(batch_id, ring_.shape());
  {
    StageTimer timer(entry, Stage::kTargetForward);
    source_.produce(plan, ring_, claim.index);
  }
  StageTimer publish_timer(entry, Stage::kTargetPublishWait);
  const BatchInfo info{plan.batch_id, plan.token_count, plan.num_docs, plan.length_bucket};
  if (!publish(ring_, claim, info)) return false;
  publish_timer.stop();
  const RingShape& s = ring_.shape();
  entry.batches.fetch_add(1, std::memory_order_relaxed);
  entry.tokens.fetch_add(plan.token_count, std::memory_order_relaxed);
  entry.hs_bytes.fetch_add(uint64_t(plan.token_count) * s.hidden_size * s.num_layers *
                               dtype_size(s.dtype),
                           std::memory_order_relaxed);
  session_.heartbeat();
  return true;
}

int TargetWorker::run() {
  const Identity self = session_.identity();
  TargetProgress& progress = ring_.target_progress(self.index);

  // Batches our previous incarnations bound but never published: ours to write again.
  std::vector<SlotClaim> adopted = adopt_previous_writes(ring_, self);
  uint64_t next_seq = progress.next_seq.load(std::memory_order_acquire);
  for (const SlotClaim& claim : adopted) {
    // A crash between binding and storing next_seq leaves the bound batch at next_seq.
    next_seq = std::max(next_seq, shard_.seq_of(ring_.slot(claim.index).batch_id.load(
                                      std::memory_order_relaxed)) + 1);
  }
  progress.next_seq.store(next_seq, std::memory_order_release);
  if (!adopted.empty() || session_.recovered_at_start().total() > 0) {
    log_line("recovered " + std::to_string(session_.recovered_at_start().total()) +
             " slot(s) and adopted " + std::to_string(adopted.size()) +
             " unpublished batch(es) of the previous epoch");
  }
  session_.set_state(ProcessState::kRunning);

  for (SlotClaim& claim : adopted) {
    const uint64_t batch_id = ring_.slot(claim.index).batch_id.load(std::memory_order_relaxed);
    if (!produce_and_publish(claim, batch_id)) {
      log_line("lost ownership of slot " + std::to_string(claim.index) + "; exiting");
      return kExitLostSlot;
    }
  }

  const uint64_t limit = ring_.shape().batch_limit;
  while (keep_running()) {
    session_.heartbeat();
    const uint64_t batch_id = shard_.batch_id(next_seq);
    if (limit != 0 && batch_id >= limit) {
      progress.exhausted.store(1, std::memory_order_release);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    pace();
    StageTimer enqueue_timer(session_.entry(), Stage::kTargetEnqueue);
    auto claim = claim_free_slot(ring_, self, uint32_t(next_seq * 7 + self.index), kClaimSlice);
    if (!claim) continue;
    enqueue_timer.stop();
    if (!keep_running()) {
      (void)unclaim(ring_, *claim);
      break;
    }
    // Bind first, then move the shard position: a crash in between re-produces the batch
    // from the slot (adopted above) and never skips or doubles it.
    if (!bind_batch(ring_, *claim, batch_id)) {
      log_line("lost ownership of slot " + std::to_string(claim->index) + "; exiting");
      return kExitLostSlot;
    }
    ++next_seq;
    progress.next_seq.store(next_seq, std::memory_order_release);
    if (!produce_and_publish(*claim, batch_id)) {
      log_line("lost ownership of slot " + std::to_string(claim->index) + "; exiting");
      return kExitLostSlot;
    }
  }
  session_.set_state(ProcessState::kDraining);
  return 0;
}

}  // namespace hsring
