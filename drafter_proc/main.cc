// hsring-drafter: one drafter process. On a ring of model batches it trains the drafter
// (drafter_proc/training_drafter.h), on the CPU or, with --gpu N, on that GPU. On a
// synthetic ring it verifies every batch it consumes: on the host in CPU mode, on its GPU
// with --gpu N (gpu_drafter_worker.h). Built twice, like hsring-target: hsring-drafter
// (CPU only) and hsring-drafter-gpu (CUDA builds), exec'd by the former for --gpu.
#include <CLI/CLI.hpp>
#include <stdexcept>

#include "common/log.h"
#include "drafter_proc/drafter_worker.h"
#include "drafter_proc/training_drafter.h"
#include "gpu/noise_schedule.h"
#include "worker/node_topology.h"
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
  DrafterOptions options;
  int gpu = -1;
  double noise_std = 0;
  std::string noise_schedule = "constant";
  std::string assembly = "pitched";
  bool no_verify = false;
  TrainingDrafterOptions training;
  train::LrSchedule& schedule = training.optimizer.schedule;
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
  app.add_option("--model", training.target_model,
                 "Training: the target's model spec (the drafter's shape derives from it)");
  app.add_option("--model-seed", training.model_seed,
                 "Training: seed of a preset target's weights (its embedding and LM head)");
  std::string objective = "auto";
  app.add_option("--objective", objective,
                 "Training: dflash (blocks it drafts), same-position (the target's own next "
                 "token; does not draft), or auto (dflash)")
      ->check(CLI::IsMember({"auto", "dflash", "same-position"}));
  DflashChoices& dflash = training.dflash;
  app.add_option("--draft-layers", dflash.draft_layers, "DFlash: draft layers (0: per target)")
      ->check(CLI::Range(0u, 64u));
  app.add_option("--block-size", dflash.block_size, "DFlash: block size B")
      ->check(CLI::Range(2u, 64u));
  app.add_option("--anchors", dflash.anchors, "DFlash: blocks per batch (0: scaled to the batch)");
  app.add_option("--loss-gamma", dflash.loss_gamma,
                 "DFlash: loss decay over block positions (0: 7 at B 16)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--mask-token-id", dflash.mask_token_id,
                 "DFlash: mask token (-1: chosen from the target's tokenizer)")
      ->check(CLI::Range(int64_t(-1), int64_t(1) << 31));
  app.add_option("--labels", dflash.labels, "DFlash: data or target")
      ->check(CLI::IsMember({"data", "target"}));
  app.add_option("--window", training.window,
                 "Training (same-position objective): sliding attention window, tokens")
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--train-seed", training.seed, "Training: seed of the drafter's initial weights");
  app.add_option("--threads", training.threads, "Training: CPU threads (0: every core)");
  app.add_option("--lr", schedule.peak_lr, "Training: peak learning rate")
      ->check(CLI::PositiveNumber);
  app.add_option("--min-lr", schedule.min_lr, "Training: learning rate at the end of the cosine")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--warmup-steps", schedule.warmup_steps, "Training: linear warmup steps");
  app.add_option("--total-steps", schedule.total_steps,
                 "Training: the step the cosine decay ends at");
  app.add_option("--weight-decay", training.optimizer.weight_decay, "Training: AdamW weight decay")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--adam-beta2", training.optimizer.beta2, "Training: AdamW's second-moment decay")
      ->check(CLI::Range(0.0, 0.999999));
  app.add_option("--max-grad-norm", training.optimizer.max_grad_norm,
                 "Training: clip the gradient's global norm to this (0: never)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--checkpoint-dir", training.checkpoint_dir,
                 "Training: checkpoint folder; a drafter resumes from its newest valid checkpoint");
  app.add_option("--checkpoint-every", training.checkpoint_every,
                 "Training: steps between checkpoints (0: only at the end)");
  app.add_option("--keep-checkpoints", training.keep_checkpoints, "Training: checkpoints kept")
      ->check(CLI::Range(1u, 1000u));
  app.add_option("--export", training.export_path,
                 "Training: where the drafter is exported at a clean stop: a DFlash folder "
                 "(--objective dflash), a safetensors file (same-position)");
  app.add_option("--run-dir", training.run_dir,
                 "Training: the run folder, where drafter 0 writes metrics.jsonl and "
                 "tensorboard/ (none: no curves)");
  app.add_option("--eval-every", training.eval_every,
                 "Training: steps between held-out evaluations written to the curves (0: none)");
  app.add_option("--eval-data", training.eval_data,
                 "Training: the token-shard folder of the held-out evaluation batches");
  app.add_flag("--eval-data-held-out", training.eval_data_held_out,
               "Training: evaluate only --eval-data's held-out documents (its last one in 16)");
  app.add_option("--nnodes", training.nnodes,
                 "Training: machines whose drafters train one model (NCCL across them)")
      ->check(CLI::Range(1u, kMaxNodes));
  app.add_option("--node-rank", training.node_rank, "Training: this machine's rank, from 0")
      ->check(CLI::Range(0u, kMaxNodes - 1));
  app.add_option("--rendezvous-dir", training.rendezvous_dir,
                 "Training across machines: the folder every machine sees, where the group meets");
  return worker_main(app, flags, Role::kDrafter, argc, argv, [&](WorkerSession& session) {
    const bool model_ring = session.ring().shape().content == PayloadContent::kModel;
    if (model_ring) {
      training.objective = parse_drafter_objective(objective != "auto" ? objective : "dflash");
      if (training.target_model.empty()) {
        log_line(
            "error: this ring carries model batches: give --model (the target's spec) "
            "so the drafter knows its shape");
        return int(kExitUsage);
      }
      if (schedule.warmup_steps > schedule.total_steps && schedule.total_steps != 0) {
        log_line("error: --warmup-steps exceeds --total-steps");
        return int(kExitUsage);
      }
      if (gpu >= 0) {
#if HSRING_HAVE_CUDA
        session.entry().gpu.store(gpu, std::memory_order_relaxed);  // for status
        training.make_backend = [gpu](const train::TrainerOptions& options, Ring& ring) {
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
    gpu_options.noise = gpu::parse_noise_schedule(noise_schedule, noise_std);
    return run_gpu_drafter(session, gpu_options);
#else
    log_line("error: --gpu needs a CUDA build of hsring; this build runs CPU workers only");
    return int(kExitUsage);
#endif
  });
}
