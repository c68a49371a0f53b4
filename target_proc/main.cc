// hsring-target: one target process. A ring of model batches (RingShape.content) gets
// the target model's captured layers over token shards (--model, --data); a synthetic ring
// gets verifiable synthetic states. On the CPU (no --gpu) the batch is written straight
// into its slot; with --gpu N it runs the GPU pipeline (target_proc/gpu_pipeline.h).
// Built twice: hsring-target (CPU only, no CUDA library loaded) and, in CUDA builds,
// hsring-target-gpu, which the CPU build execs when --gpu is given.
#include <CLI/CLI.hpp>

#include "common/log.h"
#include "model/cpu_target_model.h"
#include "target_proc/model_source.h"
#include "target_proc/target_worker.h"
#include "worker/node_topology.h"
#include "worker/worker_main.h"
#if HSRING_HAVE_CUDA
#include "target_proc/gpu_target.h"
#endif

namespace {

using namespace hsring;

// What the target's part of the run's flags (worker/run_flag_table.cc) says its data is.
ModelSourceOptions data_options_of(const RunOptions& run, uint64_t data_offset) {
  ModelSourceOptions data;
  data.data_dir = run.data;
  data.data_seed = run.data_seed;
  data.read_ahead = run.read_ahead;
  data.data_offset = data_offset;
  data.nnodes = run.nnodes;
  data.node_rank = run.node_rank;
  return data;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hsring target worker: produces hidden states into a ring", "hsring-target"};
  WorkerFlags flags;
#if !HSRING_HAVE_CUDA
  flags.gpu_program = "hsring-target-gpu";  // this is the CPU build: GPU workers are that program
#endif
  const RunOptions& run = flags.run;  // the run's flags that reach targets, parsed by worker_main
  uint32_t copy_delay_us = 0;
  bool unsafe_early_reuse = false;
  uint32_t threads = 0;
  app.add_option("--threads", threads, "CPU forward threads (0: every core)");
  // Test hooks, hidden from --help (group ""): see GpuTargetOptions.
  app.add_option("--debug-copy-delay-us", copy_delay_us)
      ->group("")
      ->check(CLI::Range(0u, 10'000'000u));
  app.add_flag("--debug-unsafe-early-reuse", unsafe_early_reuse)->group("");
  return worker_main(app, flags, Role::kTarget, argc, argv, [&](WorkerSession& session) {
    const RingShape& shape = session.ring().shape();
    const bool model_ring = shape.content == PayloadContent::kModel;
    const ModelSourceOptions data = data_options_of(run, shape.data_offset);
    const TargetOptions options{.batches_per_second = run.target_rate};
    // Error(kUsage) for a bad pair: worker_main logs it and exits kExitUsage.
    check_node_topology({data.nnodes, data.node_rank, "flags"});
    if (model_ring != (app.count("--model") > 0)) {
      log_line(model_ring ? "error: this ring carries model batches: give --model (the "
                            "launcher passes its own --model)"
                          : "error: --model was given but this ring carries synthetic batches: "
                            "create it with a model (hsring run --model ...)");
      return int(kExitUsage);
    }
    if (flags.gpu < 0 && model_ring) {
      std::unique_ptr<ModelSource> source;
      if (auto code = run_worker_setup([&] {
            auto model = open_cpu_model(run.model, run.model_seed, CpuModelOptions{threads});
            source = std::make_unique<ModelSource>(
                std::make_unique<ModelSlotWriter>(std::move(model), shape), session.ring(),
                session.identity().index, data);
          }))
        return *code;
      return TargetWorker(session, *source, options).run();
    }
    if (flags.gpu < 0) {
      SyntheticSource source(shape);
      return TargetWorker(session, source, options).run();
    }
#if HSRING_HAVE_CUDA
    GpuTargetOptions gpu_options;
    if (model_ring) {
      gpu_options.model_spec = run.model;
      gpu_options.model_seed = run.model_seed;
      gpu_options.data = data;
    }
    gpu_options.gpu = flags.gpu;
    gpu_options.postprocess_depth = run.target_postprocess_depth;
    gpu_options.gemm_flops_per_batch = run.gemm_flops_per_batch;
    gpu_options.debug_copy_delay_us = copy_delay_us;
    gpu_options.debug_unsafe_early_reuse = unsafe_early_reuse;
    gpu_options.early_publish = run.target_publish == "early";
    return run_gpu_target(session, options, gpu_options);
#else
    log_line("error: --gpu needs a CUDA build of hsring; this build runs CPU workers only");
    return int(kExitUsage);
#endif
  });
}
