#include "target_proc/batch_producer.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/log.h"
#include "common/signals.h"
#include "shm/ordered_claims.h"
#include "shm/producer.h"
#include "shm/recovery.h"

namespace hsring {

namespace {
constexpr auto kClaimSlice = std::chrono::milliseconds(100);
}

BatchProducer::BatchProducer(WorkerSession& session)
    : session_(session),
      ring_(session.ring()),
      own_planner_(std::make_unique<SyntheticPlanner>(session.ring().shape())),
      planner_(*own_planner_),
      shard_{session.identity().index, session.ring().shape().num_targets} {}

BatchProducer::BatchProducer(WorkerSession& session, BatchPlanner& planner)
    : session_(session),
      ring_(session.ring()),
      planner_(planner),
      shard_{session.identity().index, session.ring().shape().num_targets} {}

bool BatchProducer::keep_running() const {
  return !stop_requested() && !launcher_gone() &&
         ring_.header().run_state.load(std::memory_order_acquire) == uint32_t(RunState::kRunning);
}

std::vector<BatchJob> BatchProducer::jobs_of(const std::vector<SlotClaim>& adopted) const {
  std::vector<BatchJob> jobs;
  for (const SlotClaim& claim : adopted) {
    const uint64_t batch_id = ring_.slot(claim.index).batch_id.load(std::memory_order_relaxed);
    jobs.push_back(BatchJob{planner_.plan(batch_id), claim});
  }
  // Produce them in shard order, as they were first bound.
  std::sort(jobs.begin(), jobs.end(),
            [](const BatchJob& a, const BatchJob& b) { return a.plan.batch_id < b.plan.batch_id; });
  return jobs;
}

std::vector<BatchJob> BatchProducer::adopt_unpublished() {
  const Identity self = session_.identity();
  TargetProgress& progress = ring_.target_progress(self.index);
  // Before the scan: a give-back after it bumps the count past what we saw (acquire pairs
  // with give_back_unwritten's release).
  returned_seen_ = progress.returned.load(std::memory_order_acquire);
  // Batches our previous incarnations bound but never published: ours to write again.
  std::vector<SlotClaim> adopted = adopt_previous_writes(ring_, self);
  std::vector<BatchJob> jobs = jobs_of(adopted);
  uint64_t next_seq = progress.next_seq.load(std::memory_order_acquire);
  // A crash between binding and storing next_seq leaves the bound batch at next_seq.
  for (const BatchJob& job : jobs)
    next_seq = std::max(next_seq, shard_.seq_of(job.plan.batch_id) + 1);
  progress.next_seq.store(next_seq, std::memory_order_release);
  next_seq_ = next_seq;
  if (!adopted.empty() || session_.recovered_at_start().total() > 0) {
    log_line(
        fmt::format("recovered {} slot(s) and adopted {} unpublished batch(es) of the "
                    "previous epoch",
                    session_.recovered_at_start().total(), adopted.size()));
  }
  return jobs;
}

std::vector<BatchJob> BatchProducer::adopt_returned() {
  const Identity self = session_.identity();
  // Acquire: pairs with give_back_unwritten's release, so the scan sees the WRITING word.
  const uint32_t returned =
      ring_.target_progress(self.index).returned.load(std::memory_order_acquire);
  if (returned == returned_seen_) return {};
  returned_seen_ = returned;
  std::vector<BatchJob> jobs = jobs_of(adopt_previous_writes(ring_, self));
  if (!jobs.empty())
    log_line(fmt::format(
        "adopted {} batch(es) a drafter gave back unread (the previous epoch died mid-copy)",
        jobs.size()));
  return jobs;
}

PipelineStatus BatchProducer::claim_and_bind(uint64_t batch_id, SlotClaim& claim,
                                             std::optional<Stage> wait_stage,
                                             const std::atomic<bool>* cancel,
                                             uint64_t deadline_ns) {
  const Identity self = session_.identity();
  const uint64_t seq = shard_.seq_of(batch_id);
  auto cancelled = [&] { return cancel != nullptr && cancel->load(std::memory_order_acquire); };
  const uint64_t wait_start = monotonic_ns();
  ClaimResult got;
  while (!got) {
    if (got.status() == SlotStatus::kStopping || !keep_running() || cancelled())
      return PipelineStatus::kStopped;
    session_.heartbeat();
    const uint64_t now = monotonic_ns();
    if (deadline_ns != 0 && now >= deadline_ns) return PipelineStatus::kTimedOut;
    const auto slice = deadline_ns == 0
                           ? kClaimSlice
                           : std::min<std::chrono::nanoseconds>(
                                 kClaimSlice, std::chrono::nanoseconds(deadline_ns - now));
    // Under ordered claims a batch too far ahead of the drafters waits before it takes a
    // slot, so the slots never fill with batches while the one they wait for has none.
    if (!wait_for_ordered_window(ring_, batch_id, slice)) continue;
    got = claim_free_slot(ring_, self, uint32_t(seq * 7 + self.index), slice);
  }
  if (wait_stage) record_stage(session_.entry(), *wait_stage, monotonic_ns() - wait_start);
  if (!keep_running() || cancelled()) {
    (void)unclaim(ring_, *got);
    return PipelineStatus::kStopped;
  }
  // Bind first, then move the shard position: a crash in between re-produces the batch
  // from the slot (adopt_unpublished) and never skips or doubles it.
  if (bind_batch(ring_, *got, batch_id).lost()) {
    log_line(fmt::format("lost ownership of slot {}; exiting", got->index));
    return PipelineStatus::kLostSlot;
  }
  next_seq_ = std::max(next_seq_, seq + 1);
  ring_.target_progress(self.index).next_seq.store(next_seq_, std::memory_order_release);
  claim = *got;
  return PipelineStatus::kOk;
}

PipelineStatus BatchProducer::publish_batch(SlotClaim& claim, const BatchPlan& plan,
                                            const CopyEvent* early, uint64_t* ticket) {
  const BatchInfo info{plan.batch_id, plan.token_count, plan.num_docs, plan.length_bucket};
  if (publish(ring_, claim, info, early, ticket).lost()) {
    log_line(fmt::format("lost ownership of slot {}; exiting", claim.index));
    return PipelineStatus::kLostSlot;
  }
  const RingShape& s = ring_.shape();
  ProcessEntry& entry = session_.entry();
  entry.batches.fetch_add(1, std::memory_order_relaxed);
  entry.tokens.fetch_add(plan.token_count, std::memory_order_relaxed);
  entry.hs_bytes.fetch_add(
      uint64_t(plan.token_count) * s.hidden_size * s.num_layers * dtype_size(s.dtype),
      std::memory_order_relaxed);
  session_.heartbeat();
  return PipelineStatus::kOk;
}

}  // namespace hsring
