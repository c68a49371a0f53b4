#include "target_proc/target_worker.h"

#include <algorithm>
#include <thread>

#include "common/clock.h"
#include "common/log.h"
#include "shm/futex.h"
#include "target_proc/cpu_pipeline.h"
#include "worker/worker_main.h"

namespace hsring {

namespace {

int exit_code_of(PipelineStatus status) {
  switch (status) {
    case PipelineStatus::kOk:
    case PipelineStatus::kStopped:
      return kExitOk;
    case PipelineStatus::kLostSlot:
      return kExitLostSlot;
    case PipelineStatus::kFailed:
    case PipelineStatus::kTimedOut:
      return kExitInternal;  // the worker gives no deadline
  }
  return kExitInternal;
}

}  // namespace

TargetWorker::TargetWorker(WorkerSession& session, HiddenStateSource& source, TargetOptions options)
    : session_(session),
      ring_(session.ring()),
      own_producer_(std::make_unique<BatchProducer>(session, source)),
      own_pipeline_(std::make_unique<CpuPipeline>(*own_producer_, source)),
      producer_(*own_producer_),
      pipeline_(*own_pipeline_),
      options_(options) {}

TargetWorker::TargetWorker(WorkerSession& session, BatchProducer& producer, BatchPipeline& pipeline,
                           TargetOptions options)
    : session_(session),
      ring_(session.ring()),
      producer_(producer),
      pipeline_(pipeline),
      options_(options) {}

TargetWorker::~TargetWorker() = default;

void TargetWorker::pace() {
  if (options_.batches_per_second <= 0) return;
  const uint64_t period = uint64_t(1e9 / options_.batches_per_second);
  const uint64_t now = monotonic_ns();
  next_deadline_ns_ = std::max(next_deadline_ns_ + period, now);
  if (next_deadline_ns_ > now)
    std::this_thread::sleep_for(std::chrono::nanoseconds(next_deadline_ns_ - now));
}

int TargetWorker::run() {
  TargetProgress& progress = ring_.target_progress(session_.identity().index);
  std::vector<BatchJob> adopted = producer_.adopt_unpublished();
  uint64_t next_seq = producer_.next_seq();
  session_.set_state(ProcessState::kRunning);

  for (BatchJob& job : adopted) {
    const PipelineStatus status = pipeline_.submit(std::move(job));
    if (status != PipelineStatus::kOk && status != PipelineStatus::kStopped)
      return exit_code_of(status);
  }

  const uint64_t limit = ring_.shape().batch_limit;
  while (producer_.keep_running()) {
    session_.heartbeat();
    // Early-published batches of our predecessor that a drafter gave back unread.
    for (BatchJob& job : producer_.adopt_returned()) {
      const PipelineStatus status = pipeline_.submit(std::move(job));
      if (status != PipelineStatus::kOk && status != PipelineStatus::kStopped)
        return exit_code_of(status);
    }
    const uint64_t batch_id = producer_.shard().batch_id(next_seq);
    if (limit != 0 && batch_id >= limit) {
      // Exhausted means "every batch of the shard is published": wait for those in flight.
      if (PipelineStatus status = pipeline_.flush(); status != PipelineStatus::kOk)
        return exit_code_of(status);
      if (progress.exhausted.exchange(1, std::memory_order_acq_rel) == 0) {
        // Drafters waiting for hs_min_ready may now take any READY slot: tell them all.
        SharedCondition(ring_.header().ready_futex, ring_.header().ready_waiters).notify_all();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    if (options_.batches_per_second > 0) {
      pace();
      pipeline_.note_pause();
    }
    const PipelineStatus status = pipeline_.submit(BatchJob{producer_.plan(batch_id), {}});
    if (status == PipelineStatus::kStopped) break;
    if (status != PipelineStatus::kOk) return exit_code_of(status);
    ++next_seq;
  }
  // Batches already bound are finished and published; unbound ones are left to the shard.
  const PipelineStatus drained = pipeline_.flush();
  session_.set_state(ProcessState::kDraining);
  return drained == PipelineStatus::kStopped ? kExitOk : exit_code_of(drained);
}

}  // namespace hsring
