#include "drafter_proc/gpu_drafter.h"

#include <stdexcept>

#include "common/log.h"
#include "gpu/device.h"
#include "gpu/host_registration.h"
#include "worker/worker_main.h"

namespace hsring {

int run_gpu_drafter(WorkerSession& session, const GpuDrafterOptions& options) {
  std::unique_ptr<gpu::HostRegistration> pinned;
  std::unique_ptr<GpuDrafterWorker> worker;
  if (auto code = run_worker_setup([&] {
        gpu::use_gpu(options.gpu);
        session.entry().gpu.store(options.gpu, std::memory_order_relaxed);
        const bool model = session.ring().shape().content == PayloadContent::kModel;
        log_line("on " + gpu::describe_gpu(options.gpu) + "; noise " + options.noise.describe() +
                 (model            ? ", checking each model batch's invariants"
                  : options.verify ? ", verifying every element"
                                   : ""));
        pinned = gpu::pin_ring_payload(session.ring());
        worker = GpuDrafterWorker::create(session, options);
      }))
    return *code;
  const int code = worker->run();
  worker.reset();  // its copies complete before the ring is unpinned
  return code;
}

}  // namespace hsring
