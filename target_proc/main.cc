// hsring-target: one target process. On the CPU (no --gpu) it writes synthetic hidden
// states straight into slots; with --gpu N it runs the GPU pipeline (target_proc/gpu_pipeline.h).
#include "common/log.h"
#include "common/worker_main.h"
#include "target_proc/target_worker.h"
#if HSRING_HAVE_CUDA
#include "target_proc/gpu_target.h"
#endif

int main(int argc, char** argv) {
  using namespace hsring;
  CLI::App app{"hsring target worker: produces hidden states into a ring", "hsring-target"};
  WorkerFlags flags;
  TargetOptions options;
  int gpu = -1;
  uint32_t postprocess_depth = 1;
  double gemm_flops = 0;
  uint32_t copy_delay_us = 0;
  bool unsafe_early_reuse = false;
  app.add_option("--rate", options.batches_per_second,
                 "Batches per second this target produces (0: as fast as it can)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--gpu", gpu, "GPU id to run on (default: CPU mode)")->check(CLI::Range(0, 1023));
  app.add_option("--postprocess-depth", postprocess_depth,
                 "GPU: batches in postprocess (copy + publish) at once; capture buffers = depth + 1")
      ->check(CLI::Range(1u, 16u));
  app.add_option("--gemm-flops-per-batch", gemm_flops,
                 "GPU: bf16 GEMM work per forward, standing in for a model (e.g. 2e13)")
      ->check(CLI::Range(0.0, 1e18));
  // Test hooks, hidden from --help (group ""): see GpuTargetOptions.
  app.add_option("--debug-copy-delay-us", copy_delay_us)->group("")->check(CLI::Range(0u, 10'000'000u));
  app.add_flag("--debug-unsafe-early-reuse", unsafe_early_reuse)->group("");
  return worker_main(app, flags, Role::kTarget, argc, argv, [&](WorkerSession& session) {
    if (gpu < 0) {
      SyntheticSource source;
      return TargetWorker(session, source, options).run();
    }
#if HSRING_HAVE_CUDA
    GpuTargetOptions gpu_options;
    gpu_options.gpu = gpu;
    gpu_options.postprocess_depth = postprocess_depth;
    gpu_options.gemm_flops_per_batch = gemm_flops;
    gpu_options.debug_copy_delay_us = copy_delay_us;
    gpu_options.debug_unsafe_early_reuse = unsafe_early_reuse;
    return run_gpu_target(session, options, gpu_options);
#else
    log_line("error: --gpu needs a CUDA build of hsring; this build runs CPU workers only");
    return int(kExitUsage);
#endif
  });
}
