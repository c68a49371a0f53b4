// What `hsring run` checks before it creates the ring and starts any worker, so a
// configuration that cannot work fails once with a clear message instead of as a crash
// loop: room in /dev/shm, and for GPU workers a CUDA build, GPUs that exist and can
// register host memory, a memlock limit that covers the ring, enough slots for what the
// GPU targets keep in flight, and a valid noise schedule.
#pragma once

#include "launcher/run_options.h"
#include "launcher/worker_spec.h"
#include "shm/ring_layout.h"

namespace hsring {

// Throws std::invalid_argument for a bad request (a GPU that does not exist, too few
// slots) and std::runtime_error for a machine that cannot serve it (memlock, /dev/shm).
void preflight_run(const RunOptions& options, const WorkerSpec& targets, const WorkerSpec& drafters,
                   const RingShape& shape);

}  // namespace hsring
