// The table of every `hsring run` flag (worker/run_flags.h says what each column does).
// A new flag is one row here and one field in RunOptions: the launcher parses it, passes
// it to the workers its reach names, and they parse it with the same check.
#include <limits>

#include "worker/node_topology.h"
#include "worker/run_flags.h"

namespace hsring {

namespace {

using R = RunOptions;

constexpr RunFlag kRunFlags[] = {
    {.name = "--ring",
     .field = &R::ring,
     .reach = kEveryProgram,
     .check = {FlagCheck::Kind::kRingName},
     .help = "Name of the ring segment (in /dev/shm)",
     .always = true},
    {.name = "--targets",
     .field = &R::targets,
     .help = "Targets: cpu:N, or GPU ids like 0,1 (given neither this nor --drafters on a GPU "
             "machine: every GPU, split by --split)"},
    {.name = "--drafters", .field = &R::drafters, .help = "Drafters: cpu:N, or GPU ids like 2"},
    {.name = "--split",
     .field = &R::split,
     .help = "Without --targets and --drafters, how a GPU machine's GPUs are shared: auto (the "
             "split that delivers the most tokens/s, from the target's and the drafter's "
             "shapes) or a ratio targets:drafters such as 5:3"},
    {.name = "--target-cmd",
     .field = &R::target_cmd,
     .help = "Run this shell command as each target instead of hsring-target (a PyTorch "
             "target through python/hsring); it gets HSRING_RING, HSRING_ROLE, HSRING_INDEX, "
             "HSRING_EPOCH and CUDA_VISIBLE_DEVICES"},
    {.name = "--drafter-cmd",
     .field = &R::drafter_cmd,
     .help = "Run this shell command as each drafter instead of hsring-drafter"},
    {.name = "--attach-timeout",
     .field = &R::attach_timeout_s,
     .check = positive(),
     .help = "Seconds a --target-cmd / --drafter-cmd worker may take to attach to the ring"},
    {.name = "--model",
     .field = &R::model,
     .reach = kEveryProgram,
     .help = "Target model: builtin (a small target trained on the built-in corpus on first "
             "use), tiny, qwen3-8b, qwen3.6-27b, qwen3-dense-27b (random weights), a Hugging "
             "Face folder, or synthetic (verifiable made-up batches)",
     .passed = Passed::kModelRun,
     .always = true},
    {.name = "--model-seed",
     .field = &R::model_seed,
     .reach = kEveryProgram,
     .help = "Seed of a preset model's random weights",
     .passed = Passed::kModelRun},
    {.name = "--data",
     .field = &R::data,
     .reach = kLauncher | kTargets,
     .help = "Folder of token shards (hsring data pack), or builtin: the built-in target's "
             "continuations of the built-in corpus; default: builtin with --model builtin, "
             "else the built-in corpus",
     .passed = Passed::kModelRun},
    {.name = "--eval-prompts",
     .field = &R::eval_prompts,
     .help = "Prompts of the end-of-run evaluation (as `hsring eval --prompts`: a token-shard "
             "folder or JSONL chats); default: held-out documents of --data, or the built-in "
             "held-out prompts"},
    {.name = "--no-eval",
     .field = &R::end_eval,
     .help = "End the run without decoding its export (`hsring eval --drafter RUN/export` "
             "does it later)"},
    {.name = "--no-verify-data",
     .field = &R::verify_data,
     .help = "Skip reading every token of --data before the run (its checksums and vocabulary; "
             "headers and offsets are still checked, token values as batches are built)"},
    {.name = "--data-seed",
     .field = &R::data_seed,
     .reach = kLauncher | kTargets,
     .help = "Seed of the batch packing and epoch order",
     .passed = Passed::kModelRun},
    {.name = "--layers",
     .field = &R::layers,
     .help = "Captured layer ids, e.g. 1,16,31,46,61 (default: K spread from layer 1 to L-3)"},
    {.name = "--read-ahead",
     .field = &R::read_ahead,
     .reach = kLauncher | kTargets,
     .check = range(1, 256),
     .help = "Batches each target reads ahead of its forward (io_uring)",
     .passed = Passed::kModelRun},
    {.name = "--run-dir",
     .field = &R::run_dir,
     .reach = kLauncher | kDrafters,
     .help = "Folder for checkpoints and the exported drafter (default: hsring-runs/RING-TIME; "
             "under systemd /var/lib/hsring/RING)",
     .passed = Passed::kModelRun},
    // Not CLI11's excludes() with --checkpoint-dir: a config file lists every key, so both
    // would always be "given" (training_plan() refuses the two non-empty together).
    {.name = "--resume",
     .field = &R::resume,
     .help = "Continue the run whose checkpoint folder this is (RUN_DIR/checkpoints)"},
    {.name = "--checkpoint-dir",
     .field = &R::checkpoint_dir,
     .reach = kLauncher | kDrafters,
     .help = "Folder for the drafter's checkpoints (default: RUN_DIR/checkpoints; not with "
             "--resume, which continues in its own)",
     .passed = Passed::kModelRun},
    {.name = "--checkpoint-every",
     .field = &R::checkpoint_every,
     .reach = kLauncher | kDrafters,
     .help = "Drafter steps between checkpoints (0: only at the end)",
     .passed = Passed::kModelRun},
    {.name = "--eval-every",
     .field = &R::eval_every,
     .reach = kLauncher | kDrafters,
     .help = "Drafter steps between held-out evaluations (loss, teacher-forced tau) written "
             "to the curves as eval/... (0: none; CPU drafters)",
     .passed = Passed::kModelRun},
    {.name = "--eval-data",
     .field = &R::eval_data,
     .reach = kDrafters,
     .help = "The token-shard folder of the held-out evaluation batches",
     .passed = Passed::kModelRun},
    {.name = "--eval-data-held-out",
     .field = &R::eval_data_held_out,
     .reach = kDrafters,
     .help = "Evaluate only --eval-data's held-out documents (its last one in 16)",
     .passed = Passed::kModelRun},
    {.name = "--keep-checkpoints",
     .field = &R::keep_checkpoints,
     .reach = kLauncher | kDrafters,
     .check = range(1, 1000),
     .help = "Checkpoints kept (newest first)",
     .passed = Passed::kModelRun},
    {.name = "--lr",
     .field = &R::lr,
     .reach = kLauncher | kDrafters,
     .check = positive(),
     .help = "Drafter peak learning rate (AdamW)",
     .passed = Passed::kModelRun},
    {.name = "--min-lr",
     .field = &R::min_lr,
     .reach = kLauncher | kDrafters,
     .check = non_negative(),
     .help = "Learning rate at the end of the cosine decay",
     .passed = Passed::kModelRun},
    {.name = "--warmup-steps",
     .field = &R::warmup_steps,
     .reach = kLauncher | kDrafters,
     .help = "Linear warmup steps",
     .passed = Passed::kModelRun},
    {.name = "--total-steps",
     .field = &R::total_steps,
     .reach = kDrafters,
     .help = "The step the cosine decay ends at (0: no decay)",
     .passed = Passed::kModelRun},
    {.name = "--adam-beta2",
     .field = &R::adam_beta2,
     .reach = kLauncher | kDrafters,
     .check = range(0, 0.999999),
     .help = "AdamW's second-moment decay",
     .passed = Passed::kModelRun},
    {.name = "--weight-decay",
     .field = &R::weight_decay,
     .reach = kLauncher | kDrafters,
     .check = range(0, 1),
     .help = "AdamW's decoupled weight decay",
     .passed = Passed::kModelRun},
    {.name = "--max-grad-norm",
     .field = &R::max_grad_norm,
     .reach = kLauncher | kDrafters,
     .check = non_negative(),
     .help = "Clip the gradient's global norm to this (0: never)",
     .passed = Passed::kModelRun},
    {.name = "--window",
     .field = &R::window,
     .reach = kLauncher | kDrafters,
     .check = range(1, 1u << 20),
     .help = "Drafter sliding attention window, tokens",
     .passed = Passed::kModelRun},
    {.name = "--train-seed",
     .field = &R::train_seed,
     .reach = kLauncher | kDrafters,
     .help = "Seed of the drafter's initial weights",
     .passed = Passed::kModelRun},
    {.name = "--objective",
     .field = &R::objective,
     .reach = kLauncher | kDrafters,
     .check = one_of("auto|dflash|same-position"),
     .help = "What the drafter learns: dflash (blocks it drafts), same-position (the target's "
             "own next token; does not draft), auto (dflash)",
     .passed = Passed::kModelRun},
    {.name = "--export",
     .field = &R::drafter_export,
     .reach = kDrafters,
     .help = "Where the drafter is exported at a clean stop: a DFlash folder (--objective "
             "dflash), a safetensors file (same-position)",
     .passed = Passed::kModelRun},
    {.name = "--draft-layers",
     .field = &R::draft_layers,
     .reach = kLauncher | kDrafters,
     .check = range(0, 64),
     .help = "DFlash: draft decoder layers (0: 5, or 1 for a target narrower than 1024)",
     .passed = Passed::kDflashRun},
    {.name = "--block-size",
     .field = &R::block_size,
     .reach = kLauncher | kDrafters,
     .check = range(2, 64),
     .help = "DFlash: block size B (the anchor and B - 1 drafted tokens)",
     .passed = Passed::kDflashRun},
    {.name = "--anchors",
     .field = &R::anchors,
     .reach = kLauncher | kDrafters,
     .check = range(0, 1u << 20),
     .help = "DFlash: blocks per batch (0: 512 at 16384 tokens, in proportion)",
     .passed = Passed::kDflashRun},
    {.name = "--loss-gamma",
     .field = &R::loss_gamma,
     .reach = kLauncher | kDrafters,
     .check = range(0, 1e6),
     .help = "DFlash: decay of the loss weight exp(-(j-1)/gamma) over block positions (0: 7 at "
             "B 16)",
     .passed = Passed::kDflashRun},
    {.name = "--mask-token-id",
     .field = &R::mask_token_id,
     .reach = kLauncher | kDrafters,
     .check = range(-1, int64_t(1) << 31),
     .help = "DFlash: the token of the masked block positions (-1: chosen from the target's "
             "tokenizer, else the vocabulary's last row; docs/dflash-export.md)",
     .passed = Passed::kDflashRun},
    {.name = "--labels",
     .field = &R::labels,
     .reach = kLauncher | kDrafters,
     .check = one_of("data|target"),
     .help = "DFlash: what block positions predict: data (the data's next token) or target "
             "(the target's greedy token)",
     .passed = Passed::kDflashRun},
    {.name = "--nnodes",
     .field = &R::nnodes,
     .reach = kEveryProgram,
     .check = range(1, kMaxNodes),
     .help = "Machines whose drafters train one model, one launcher each (default: torchrun's "
             "or Slurm's, else 1)",
     .passed = Passed::kModelRun},
    {.name = "--node-rank",
     .field = &R::node_rank,
     .reach = kEveryProgram,
     .check = range(0, kMaxNodes - 1),
     .help = "This machine's rank, 0 to NNODES-1 (node 0's drafter 0 writes the checkpoints)",
     .passed = Passed::kModelRun},
    {.name = "--rendezvous-dir",
     .field = &R::rendezvous_dir,
     .reach = kLauncher | kDrafters,
     .help = "With --nnodes: the folder every machine sees where the drafter group meets "
             "(default: RUN_DIR/rendezvous)",
     .passed = Passed::kModelRun},
    {.name = "--slots",
     .field = &R::slots,
     .check = range(2, kMaxSlots),
     .help = "Slots in the ring"},
    {.name = "--max-tokens",
     .field = &R::max_tokens,
     .check = range(1, 1u << 20),
     .help = "Tokens per slot"},
    {.name = "--hidden-size",
     .field = &R::hidden_size,
     .check = range(0, 1u << 16),
     .help = "Hidden size H of synthetic batches (0: 256; a model's is its own)"},
    {.name = "--num-layers",
     .field = &R::num_layers,
     .check = range(0, kMaxCapturedLayers),
     .help = "Captured layers K (0: as many as --layers names, else 5)"},
    {.name = "--dtype",
     .field = &R::dtype,
     .check = one_of("bf16|fp16|fp32"),
     .help = "Hidden-state dtype"},
    {.name = "--no-split-fc-layers",
     .field = &R::split_layers,
     .help = "Store the K layers as one [T, K*H] region instead of K regions"},
    {.name = "--hs-min-ready",
     .field = &R::hs_min_ready,
     .check = range(1, kMaxSlots),
     .help = "Drafters wait for this many READY slots, then pull one at random"},
    {.name = "--deterministic",
     .field = &R::deterministic,
     .help = "Drafters consume batches in the order of their ids, so the same flags and seeds "
             "give the same drafter (slower: docs/drafter-training.md, \"Deterministic runs\")"},
    {.name = "--batches",
     .field = &R::batches,
     .check = range(0, uint64_t(1) << 28),
     .help = "Stop after this many batches are consumed (0: no batch limit)"},
    {.name = "--seconds",
     .field = &R::seconds,
     .check = non_negative(),
     .help = "Stop after this many seconds (0: no time limit)"},
    {.name = "--target-rate",
     .field = &R::target_rate,
     .reach = kLauncher | kTargets,
     .check = non_negative(),
     .help = "Batches per second per target (0: unlimited)",
     .worker_name = "--rate"},
    {.name = "--drafter-step-ms",
     .field = &R::drafter_step_ms,
     .reach = kLauncher | kDrafters,
     .check = non_negative(),
     .help = "Simulated drafter work per batch, ms",
     .worker_name = "--step-ms"},
    {.name = "--target-publish",
     .field = &R::target_publish,
     .reach = kLauncher | kTargets,
     .check = one_of("after-copy|early"),
     .help = "GPU targets: publish a slot once its D2H completed (after-copy), or as soon as "
             "it is enqueued with a CUDA IPC event that drafters poll (early; "
             "docs/gpu-data-path.md)",
     .passed = Passed::kGpuWorker,
     .worker_name = "--publish"},
    {.name = "--target-postprocess-depth",
     .field = &R::target_postprocess_depth,
     .reach = kLauncher | kTargets,
     .check = range(1, 16),
     .help = "GPU targets: batches copied and published behind the forward at once; capture "
             "buffers = depth + 1",
     .passed = Passed::kGpuWorker,
     .worker_name = "--postprocess-depth"},
    {.name = "--gemm-flops-per-batch",
     .field = &R::gemm_flops_per_batch,
     .reach = kLauncher | kTargets,
     .check = range(0, 1e18),
     .help = "GPU targets: bf16 GEMM work per forward, standing in for a model (e.g. 2e13)",
     .passed = Passed::kGpuWorker},
    {.name = "--noise-std",
     .field = &R::noise_std,
     .reach = kLauncher | kDrafters,
     .check = non_negative(),
     .help = "GPU drafters: std of the Gaussian noise added to hidden states",
     .passed = Passed::kGpuWorker},
    {.name = "--noise-schedule",
     .field = &R::noise_schedule,
     .reach = kLauncher | kDrafters,
     .help = "GPU drafters: constant, or linear:START,END,STEPS over each drafter's steps",
     .passed = Passed::kGpuWorker},
    {.name = "--max-restarts",
     .field = &R::max_restarts,
     .check = range(1, 1u << 30),
     .help = "Crashes of one worker within --restart-window that stop the run"},
    {.name = "--restart-window",
     .field = &R::restart_window_s,
     .check = positive(),
     .help = "Crash-loop window, seconds"},
    {.name = "--drain-timeout",
     .field = &R::drain_timeout_s,
     .check = non_negative(),
     .help = "Seconds workers get to finish at stop before SIGKILL (0: 10, or 300 when "
             "drafters train and write their last checkpoint)"},
    {.name = "--hang-timeout",
     .field = &R::hang_timeout_s,
     .check = non_negative(),
     .help = "Seconds a running worker may go without a heartbeat before the launcher kills "
             "and restarts it as hung (0: never)"},
    {.name = "--summary-json",
     .field = &R::summary_json,
     .help = "Write the run's summary as JSON to this path"},
    {.name = "--metrics-file",
     .field = &R::metrics_file,
     .help = "Rewrite this file every second with Prometheus metrics (node_exporter textfile "
             "collector)"},
    {.name = "--log-dir",
     .field = &R::log_dir,
     .help = "Write each worker's log to DIR/ROLE-INDEX.log instead of stderr"},
    {.name = "--keep-ring",
     .field = &R::keep_ring,
     .help = "Leave the segment in /dev/shm at exit (for inspection)"},
    {.name = "--quiet", .field = &R::quiet, .help = "No progress line", .alias = "-q"},
    // Always passed: a worker given none reads HSRING_PROFILE_INTERVAL, which the launcher
    // has already resolved against the flag and the config file.
    {.name = "--profile-interval",
     .field = &R::profile_interval_s,
     .reach = kEveryProgram,
     .check = {FlagCheck::Kind::kProfileInterval},
     .help = "Workers log their stage timings (count, mean, p50, p99) every S seconds; 0: off. "
             "Default: $HSRING_PROFILE_INTERVAL, else 0",
     .always = true},
};

// The table's own consistency, checked by the compiler: "" when every row is well formed.
consteval std::string_view table_problem() {
  constexpr size_t kBool = 0, kString = 5;
  for (const RunFlag& flag : kRunFlags) {
    const size_t type = flag.field.index();
    const FlagCheck::Kind kind = flag.check.kind;
    if (!flag.name.starts_with("--") || flag.help.empty()) return flag.name;
    const bool text_check = kind == FlagCheck::Kind::kChoices || kind == FlagCheck::Kind::kRingName;
    if (kind != FlagCheck::Kind::kNone && (type == kBool || (type == kString) != text_check))
      return flag.name;  // a flag has no value to check; a number's check on a string or back
    if (type == kBool && flag.always) return flag.name;  // passed always, it would flip the value
    if ((flag.reach & kWorkers) == 0 && (!flag.worker_name.empty() || flag.always))
      return flag.name;  // worker columns on a flag no worker gets
    for (const RunFlag& other : kRunFlags) {
      if (&other == &flag) break;
      for (uint8_t program : {kLauncher, kTargets, kDrafters}) {
        if ((flag.reach & other.reach & program) != 0 &&
            flag_name(flag, program) == flag_name(other, program))
          return flag.name;  // declared twice for one program
      }
    }
  }
  return "";
}
static_assert(table_problem().empty(), "a row of kRunFlags is malformed: see table_problem()");

}  // namespace

std::span<const RunFlag> run_flags() { return kRunFlags; }

}  // namespace hsring
