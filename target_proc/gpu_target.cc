#include "target_proc/gpu_target.h"

#include <fmt/format.h>

#include <stdexcept>

#include "common/log.h"
#include "gpu/device.h"
#include "gpu/host_registration.h"
#include "model/cuda_target_model.h"
#include "target_proc/gpu_model_source.h"
#include "worker/worker_main.h"

namespace hsring {

int run_gpu_target(WorkerSession& session, const TargetOptions& options,
                   const GpuTargetOptions& gpu_options) {
  std::unique_ptr<gpu::HostRegistration> pinned;
  std::unique_ptr<GpuModelSource> model;
  std::unique_ptr<BatchProducer> producer;
  std::unique_ptr<GpuTargetPipeline> pipeline;
  GpuTargetOptions pipeline_options = gpu_options;
  if (auto code = run_worker_setup([&] {
        gpu::use_gpu(gpu_options.gpu);
        session.entry().gpu.store(gpu_options.gpu, std::memory_order_relaxed);
        if (!gpu_options.model_spec.empty()) {
          auto cuda_model =
              open_cuda_model(gpu_options.model_spec, gpu_options.model_seed, gpu_options.gpu);
          log_line(fmt::format("model {}: {} MiB of bf16 weights", cuda_model->config().name,
                               cuda_model->weight_bytes() >> 20));
          model = std::make_unique<GpuModelSource>(std::move(cuda_model), session.ring(),
                                                   session.identity().index, gpu_options.data,
                                                   gpu_options.postprocess_depth + 1);
          pipeline_options.model = model.get();
          producer = std::make_unique<BatchProducer>(session, *model);
        } else {
          producer = std::make_unique<BatchProducer>(session);
        }
        log_line(fmt::format("on {}; postprocess depth {}, {} layers, {}",
                             gpu::describe_gpu(gpu_options.gpu), gpu_options.postprocess_depth,
                             session.ring().shape().split_layers ? "split" : "concatenated",
                             gpu_options.early_publish ? "published early (CUDA IPC events)"
                                                       : "published after the copy"));
        pinned = gpu::pin_ring_payload(session.ring());
        pipeline = GpuTargetPipeline::create(*producer, pipeline_options);
      }))
    return *code;
  const int code = TargetWorker(session, *producer, *pipeline, options).run();
  pipeline.reset();  // every copy into the pinned ring completes before it is unpinned
  return code;
}

}  // namespace hsring
