// A target process on a GPU: checks and selects the GPU, pins the ring, and runs the
// shared target loop over the GPU pipeline.
#pragma once

#include "shm/worker_session.h"
#include "target_proc/gpu_pipeline.h"
#include "target_proc/target_worker.h"

namespace hsring {

// Returns the process exit code; setup errors (no such GPU, memlock, pinning) are logged
// as "error: ..." and end the process with kExitUsage or kExitRingError.
int run_gpu_target(WorkerSession& session, const TargetOptions& options,
                   const GpuTargetOptions& gpu_options);

}  // namespace hsring
