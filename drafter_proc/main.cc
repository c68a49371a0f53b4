// hsring-drafter: one drafter process. On a ring of model batches it trains the drafter
// (drafter_proc/training_drafter.h), on the CPU or, with --gpu N, on that GPU. On a
// synthetic ring it verifies every batch it consumes: on the host in CPU mode, on its GPU
// with --gpu N (gpu_drafter_worker.h). Built twice, like hsring-target: hsring-drafter
// (CPU only) and hsring-drafter-gpu (CUDA builds), exec'd by the former for --gpu.
#include <CLI/CLI.hpp>

#include "common/log.h"
#include "drafter_proc/drafter_flags.h"
#include "drafter_proc/drafter_worker.h"
#include "drafter_proc/training_drafter.h"
#include "gpu/noise_schedule.h"
#include "worker/worker_main.h"
#if HSRING_HAVE_CUDA
#include "drafter_proc/gpu_drafter.h"
#include "drafter_proc/gpu_training_backend.h"
#endif

int main(int argc, char** argv) {
  using namespace hsring;
  CLI::App app{"hsring drafter worker: consumes hidden states from a ring", "hsring-drafter"};
  WorkerFlags flags;
#if !HSRING_HAVE_CUDA
  flags.gpu_program = "hsring-drafter-gpu";  // this is the CPU build: GPU workers are that program
#endif
  const RunOptions& run = flags.run;  // the run's flags that reach drafters, parsed by worker_main
  DrafterOptions options;
  std::string assembly = "pitched";
  bool no_verify = false;
  uint32_t threads = 0;
  app.add_option("--seed", options.seed, "Seed of the random pull (and of the GPU noise)");
  app.add_option("--assembly", assembly,
                 "GPU: how split layers become [T, K*H]: pitched (2-D DMA) or staged")
      ->check(CLI::IsMember({"pitched", "staged"}));
  app.add_flag("--no-verify", no_verify, "GPU: skip the per-element check (benchmarks)");
  app.add_option("--threads", threads, "Training: CPU threads (0: every core)");
  return worker_main(app, flags, Role::kDrafter, argc, argv, [&](WorkerSession& session) {
    const bool model_ring = session.ring().shape().content == PayloadContent::kModel;
    const int gpu = flags.gpu;
    options.step_ms = run.drafter_step_ms;
    if (model_ring) {
      if (app.count("--model") == 0) {
        log_line(
            "error: this ring carries model batches: give --model (the target's spec) "
            "so the drafter knows its shape");
        return int(kExitUsage);
      }
      // Error(kUsage) for a warmup past --total-steps: worker_main logs it, exits kExitUsage.
      TrainingDrafterOptions training = training_options_of(run);
      training.threads = threads;
      if (gpu >= 0) {
#if HSRING_HAVE_CUDA
        session.entry().gpu.store(gpu, std::memory_order_relaxed);  // for status
        training.make_backend = [gpu](const train::SamePositionTrainerOptions& options,
                                      Ring& ring) {
          return make_gpu_training_backend(options, ring, gpu);
        };
        training.make_dflash_backend = [gpu](const train::DflashTrainerOptions& options,
                                             Ring& ring) {
          return make_gpu_dflash_backend(options, ring, gpu);
        };
#else
        log_line("error: --gpu needs a CUDA build of hsring; this build trains on the CPU only");
        return int(kExitUsage);
#endif
      }
      return run_training_drafter(session, training);
    }
    if (gpu < 0) return DrafterWorker(session, options).run();
#if HSRING_HAVE_CUDA
    GpuDrafterOptions gpu_options;
    gpu_options.gpu = gpu;
    gpu_options.seed = options.seed;
    gpu_options.step_ms = options.step_ms;
    gpu_options.verify = !no_verify;
    gpu_options.assembly = assembly == "staged" ? GpuDrafterOptions::Assembly::kStagedCopy
                                                : GpuDrafterOptions::Assembly::kPitchedCopy;
    // Error(kUsage) for a bad schedule: worker_main logs it and exits kExitUsage.
    gpu_options.noise = gpu::parse_noise_schedule(run.noise_schedule, run.noise_std);
    return run_gpu_drafter(session, gpu_options);
#else
    log_line("error: --gpu needs a CUDA build of hsring; this build runs CPU workers only");
    return int(kExitUsage);
#endif
  });
}
