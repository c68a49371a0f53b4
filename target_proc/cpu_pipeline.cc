#include "target_proc/cpu_pipeline.h"

#include "shm/stage_timer.h"

namespace hsring {

PipelineStatus CpuPipeline::submit(BatchJob job) {
  SlotClaim claim;
  if (job.bound) {
    claim = *job.bound;
  } else if (PipelineStatus s =
                 producer_.claim_and_bind(job.plan.batch_id, claim, Stage::kTargetEnqueue);
             s != PipelineStatus::kOk) {
    return s;
  }
  ProcessEntry& entry = producer_.session().entry();
  {
    StageTimer timer(entry, Stage::kTargetForward);
    source_.produce(job.plan, producer_.ring(), claim.index);
  }
  StageTimer publish_timer(entry, Stage::kTargetPublishWait);
  return producer_.publish_batch(claim, job.plan);
}

}  // namespace hsring
