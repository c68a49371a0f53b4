// A drafter process on a GPU: checks and selects the GPU, pins the ring, and runs the
// GPU drafter loop.
#pragma once

#include "drafter_proc/gpu_drafter_worker.h"
#include "shm/worker_session.h"

namespace hsring {

// Returns the process exit code; setup errors are logged as "error: ...".
int run_gpu_drafter(WorkerSession& session, const GpuDrafterOptions& options);

}  // namespace hsring
