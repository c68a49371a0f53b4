#include "drafter_proc/gpu_drafter.h"

#include <stdexcept>

#include "common/log.h"
#include "common/worker_main.h"
#include "gpu/device.h"
#include "gpu/host_registration.h"

namespace hsring {

int run_gpu_drafter(WorkerSession& session, const GpuDrafterOptions& options) {
  std::unique_ptr<gpu::HostRegistration> pinned;
  std::unique_ptr<GpuDrafterWorker> worker;
  try {
    gpu::use_gpu(options.gpu);
    session.entry().gpu.store(options.gpu, std::memory_order_relaxed);
    log_line("on " + gpu::describe_gpu(options.gpu) + "; noise " + options.noise.describe() +
             (options.verify ? ", verifying every element" : ""));
    pinned = gpu::pin_ring_payload(session.ring());
    worker = GpuDrafterWorker::create(session, options);
  } catch (const std::invalid_argument& e) {
    log_line(std::string("error: ") + e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    log_line(std::string("error: ") + e.what());
    return kExitRingError;
  }
  const int code = worker->run();
  worker.reset();  // its copies complete before the ring is unpinned
  return code;
}

}  // namespace hsring
