// The CPU target's pipeline: bind a slot, let the source write the batch straight into
// it on the host, publish. Everything happens inside submit().
#pragma once

#include "target_proc/batch_producer.h"
#include "target_proc/hidden_state_source.h"

namespace hsring {

class CpuPipeline final : public BatchPipeline {
 public:
  CpuPipeline(BatchProducer& producer, HiddenStateSource& source)
      : producer_(producer), source_(source) {}
  PipelineStatus submit(BatchJob job) override;
  PipelineStatus flush() override { return PipelineStatus::kOk; }

 private:
  BatchProducer& producer_;
  HiddenStateSource& source_;
};

}  // namespace hsring
