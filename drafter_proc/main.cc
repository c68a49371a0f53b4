// hsring-drafter: one drafter process. In verify mode it checks every batch it consumes:
// on the host in CPU mode, on its GPU with --gpu N (drafter_proc/gpu_drafter_worker.h).
#include <stdexcept>

#include "common/log.h"
#include "common/worker_main.h"
#include "drafter_proc/drafter_worker.h"
#include "gpu/noise_schedule.h"
#if HSRING_HAVE_CUDA
#include "drafter_proc/gpu_drafter.h"
#endif

int main(int argc, char** argv) {
  using namespace hsring;
  CLI::App app{"hsring drafter worker: consumes hidden states from a ring", "hsring-drafter"};
  WorkerFlags flags;
  DrafterOptions options;
  int gpu = -1;
  double noise_std = 0;
  std::string noise_schedule = "constant";
  std::string assembly = "pitched";
  bool no_verify = false;
  app.add_option("--step-ms", options.step_ms, "Simulated training time per batch, ms")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", options.seed, "Seed of the random pull (and of the GPU noise)");
  app.add_option("--gpu", gpu, "GPU id to run on (default: CPU mode)")->check(CLI::Range(0, 1023));
  app.add_option("--noise-std", noise_std, "GPU: std of the Gaussian noise added to hidden states")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--noise-schedule", noise_schedule,
                 "GPU: constant, or linear:START,END,STEPS (std over the drafter's steps)");
  app.add_option("--assembly", assembly,
                 "GPU: how split layers become [T, K*H]: pitched (2-D DMA) or staged")
      ->check(CLI::IsMember({"pitched", "staged"}));
  app.add_flag("--no-verify", no_verify, "GPU: skip the per-element check (benchmarks)");
  return worker_main(app, flags, Role::kDrafter, argc, argv, [&](WorkerSession& session) {
    if (gpu < 0) return DrafterWorker(session, options).run();
#if HSRING_HAVE_CUDA
    GpuDrafterOptions gpu_options;
    gpu_options.gpu = gpu;
    gpu_options.seed = options.seed;
    gpu_options.step_ms = options.step_ms;
    gpu_options.verify = !no_verify;
    gpu_options.assembly = assembly == "staged" ? GpuDrafterOptions::Assembly::kStagedCopy
                                                : GpuDrafterOptions::Assembly::kPitchedCopy;
    try {
      gpu_options.noise = gpu::parse_noise_schedule(noise_schedule, noise_std);
    } catch (const std::invalid_argument& e) {
      log_line(std::string("error: ") + e.what());
      return int(kExitUsage);
    }
    return run_gpu_drafter(session, gpu_options);
#else
    log_line("error: --gpu needs a CUDA build of hsring; this build runs CPU workers only");
    return int(kExitUsage);
#endif
  });
}
