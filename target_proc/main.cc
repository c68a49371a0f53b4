// hsring-target: one target process. A ring of model batches (RingShape.content) gets
// the target model's captured layers over token shards (--model, --data); a synthetic ring
// gets verifiable synthetic states. On the CPU (no --gpu) the batch is written straight
// into its slot; with --gpu N it runs the GPU pipeline (target_proc/gpu_pipeline.h).
// Built twice: hsring-target (CPU only, no CUDA library loaded) and, in CUDA builds,
// hsring-target-gpu, which the CPU build execs when --gpu is given.
#include <CLI/CLI.hpp>
#include <stdexcept>

#include "common/log.h"
#include "model/cpu_target_model.h"
#include "target_proc/model_source.h"
#include "target_proc/target_worker.h"
#include "worker/node_topology.h"
#include "worker/worker_main.h"
#if HSRING_HAVE_CUDA
#include "target_proc/gpu_target.h"
#endif

int main(int argc, char** argv) {
  using namespace hsring;
  CLI::App app{"hsring target worker: produces hidden states into a ring", "hsring-target"};
  WorkerFlags flags;
#if !HSRING_HAVE_CUDA
  flags.gpu_program = "hsring-target-gpu";  // this is the CPU build: GPU workers are that program
#endif
  TargetOptions options;
  int gpu = -1;
  uint32_t postprocess_depth = 1;
  double gemm_flops = 0;
  uint32_t copy_delay_us = 0;
  bool unsafe_early_reuse = false;
  std::string publish = "after-copy";
  std::string model_spec;
  uint64_t model_seed = 0;
  uint32_t threads = 0;
  ModelSourceOptions data;
  app.add_option("--rate", options.batches_per_second,
                 "Batches per second this target produces (0: as fast as it can)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--gpu", gpu, "GPU id to run on (default: CPU mode)")->check(CLI::Range(0, 1023));
  app.add_option(
         "--postprocess-depth", postprocess_depth,
         "GPU: batches in postprocess (copy + publish) at once; capture buffers = depth + 1")
      ->check(CLI::Range(1u, 16u));
  app.add_option("--publish", publish,
                 "GPU: publish a slot after its copy completed (after-copy), or at once with a "
                 "CUDA IPC event the drafter polls (early)")
      ->check(CLI::IsMember({"after-copy", "early"}));
  app.add_option("--gemm-flops-per-batch", gemm_flops,
                 "GPU: bf16 GEMM work per forward, standing in for a model (e.g. 2e13)")
      ->check(CLI::Range(0.0, 1e18));
  app.add_option("--model", model_spec,
                 "Target model: a preset (tiny, qwen3-8b, qwen3.6-27b, qwen3-dense-27b) or a "
                 "Hugging Face folder; "
                 "required by a ring of model batches");
  app.add_option("--model-seed", model_seed, "Seed of a preset's random weights");
  app.add_option("--data", data.data_dir, "Folder of token shards (default: the built-in corpus)");
  app.add_option("--data-seed", data.data_seed, "Seed of the batch packing and epoch order");
  app.add_option("--read-ahead", data.read_ahead, "Batches read ahead of the forward")
      ->check(CLI::Range(1u, 256u));
  app.add_option("--threads", threads, "CPU forward threads (0: every core)");
  app.add_option("--nnodes", data.nnodes,
                 "Machines in the run: each reads its own share of the data")
      ->check(CLI::Range(1u, kMaxNodes));
  app.add_option("--node-rank", data.node_rank, "This machine's rank, from 0")
      ->check(CLI::Range(0u, kMaxNodes - 1));
  // Test hooks, hidden from --help (group ""): see GpuTargetOptions.
  app.add_option("--debug-copy-delay-us", copy_delay_us)
      ->group("")
      ->check(CLI::Range(0u, 10'000'000u));
  app.add_flag("--debug-unsafe-early-reuse", unsafe_early_reuse)->group("");
  return worker_main(app, flags, Role::kTarget, argc, argv, [&](WorkerSession& session) {
    const RingShape& shape = session.ring().shape();
    const bool model_ring = shape.content == PayloadContent::kModel;
    data.data_offset = shape.data_offset;
    // Error(kUsage) for a bad pair: worker_main logs it and exits kExitUsage.
    check_node_topology({data.nnodes, data.node_rank, "flags"});
    if (model_ring == model_spec.empty()) {
      log_line(model_ring ? "error: this ring carries model batches: give --model (the "
                            "launcher passes its own --model)"
                          : "error: --model was given but this ring carries synthetic batches: "
                            "create it with a model (hsring run --model ...)");
      return int(kExitUsage);
    }
    if (gpu < 0 && model_ring) {
      std::unique_ptr<ModelSource> source;
      if (auto code = run_worker_setup([&] {
            auto model = open_cpu_model(model_spec, model_seed, CpuModelOptions{threads});
            source = std::make_unique<ModelSource>(
                std::make_unique<ModelSlotWriter>(std::move(model), shape), session.ring(),
                session.identity().index, data);
          }))
        return *code;
      return TargetWorker(session, *source, options).run();
    }
    if (gpu < 0) {
      SyntheticSource source(shape);
      return TargetWorker(session, source, options).run();
    }
#if HSRING_HAVE_CUDA
    GpuTargetOptions gpu_options;
    if (model_ring) {
      gpu_options.model_spec = model_spec;
      gpu_options.model_seed = model_seed;
      gpu_options.data = data;
    }
    gpu_options.gpu = gpu;
    gpu_options.postprocess_depth = postprocess_depth;
    gpu_options.gemm_flops_per_batch = gemm_flops;
    gpu_options.debug_copy_delay_us = copy_delay_us;
    gpu_options.debug_unsafe_early_reuse = unsafe_early_reuse;
    gpu_options.early_publish = publish == "early";
    return run_gpu_target(session, options, gpu_options);
#else
    log_line("error: --gpu needs a CUDA build of hsring; this build runs CPU workers only");
    return int(kExitUsage);
#endif
  });
}
