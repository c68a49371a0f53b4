#include "target_proc/gpu_target.h"

#include <stdexcept>

#include "common/log.h"
#include "common/worker_main.h"
#include "gpu/device.h"
#include "gpu/host_registration.h"

namespace hsring {

int run_gpu_target(WorkerSession& session, const TargetOptions& options,
                   const GpuTargetOptions& gpu_options) {
  std::unique_ptr<gpu::HostRegistration> pinned;
  std::unique_ptr<GpuTargetPipeline> pipeline;
  BatchProducer producer(session);
  if (auto code = run_worker_setup([&] {
        gpu::use_gpu(gpu_options.gpu);
        session.entry().gpu.store(gpu_options.gpu, std::memory_order_relaxed);
        log_line("on " + gpu::describe_gpu(gpu_options.gpu) + "; postprocess depth " +
                 std::to_string(gpu_options.postprocess_depth) + ", " +
                 (session.ring().shape().split_layers ? "split" : "concatenated") + " layers");
        pinned = gpu::pin_ring_payload(session.ring());
        pipeline = GpuTargetPipeline::create(producer, gpu_options);
      }))
    return *code;
  const int code = TargetWorker(session, producer, *pipeline, options).run();
  pipeline.reset();  // every copy into the pinned ring completes before it is unpinned
  return code;
}

}  // namespace hsring
