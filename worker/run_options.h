// Everything `hsring run` can be told, with its defaults: one struct that the launcher
// parses its command line (and config file) into and each worker parses the flags it is
// given into, so a default is written once, here. Which flag sets which field, with its
// check and help, and which workers receive it: worker/run_flag_table.cc.
#pragma once

#include <cstdint>
#include <string>

namespace hsring {

struct RunOptions {
  std::string ring = "hsring";
  std::string targets = "cpu:2";
  std::string drafters = "cpu:1";
  // How a GPU machine is split when neither is given: auto or targets:drafters
  // (launcher/gpu_split.h)
  std::string split = "auto";
  // User commands run as the targets / drafters instead of hsring's own programs
  // (launcher/user_command.h); "" : hsring-target / hsring-drafter.
  std::string target_cmd;
  std::string drafter_cmd;
  // Seconds a user command may take to attach to the ring before the run stops with an
  // error naming it (a command that never calls from_env / hs_*_open).
  double attach_timeout_s = 120;

  // What the targets produce (docs/target-model.md, docs/data-format.md): a model's
  // captured layers over token shards, or "synthetic" verifiable batches.
  // "builtin": the small target hsring trains on the built-in corpus on first use
  // (builtin/pretrain.h); presets (tiny, qwen3-8b, ...) have random weights.
  std::string model = "builtin";
  uint64_t model_seed = 0;  // a preset's random weights
  // Token shards. "" = with the built-in target, its continuations of the built-in corpus
  // (eval/builtin_data.h), else the built-in corpus; "builtin" = those continuations.
  std::string data;
  bool data_is_builtin = false;  // data was resolved to the built-in data's folder
  // The end-of-run evaluation's prompts (eval::PromptChoice::prompts): a prompt folder or
  // JSONL chats; "": held-out documents of the data.
  std::string eval_prompts;
  bool end_eval = true;  // --no-eval: the run ends without decoding its export
  // Held-out curves: every eval_every steps (0: never) drafter 0 evaluates the held-out
  // batches of eval_data (resolved by main: eval::resolve_held_out_data; eval_data and
  // eval_data_held_out are flags of the drafters only).
  uint64_t eval_every = 0;
  std::string eval_data;
  bool eval_data_held_out = false;
  bool verify_data = true;  // preflight reads every token: both checksums, the vocabulary
  uint64_t data_seed = 0;   // batch packing and epoch order
  std::string layers;       // captured layer ids "1,16,31"; "" = the DFlash rule
  uint32_t read_ahead = 4;  // batches a target reads ahead of its forward

  // Drafter training (model runs; docs/drafter-training.md, docs/checkpoint-format.md).
  std::string run_dir;  // checkpoints and the exported drafter; "" = hsring-runs/<ring>-<time>
  std::string resume;   // a checkpoint folder of an earlier run to continue
  std::string checkpoint_dir;  // "" : RUN_DIR/checkpoints (--resume names its own)
  uint64_t checkpoint_every = 100;
  uint32_t keep_checkpoints = 3;
  double lr = 1e-3;
  double min_lr = 1e-4;
  uint64_t warmup_steps = 20;
  double adam_beta2 = 0.95;  // AdamW (train/optimizer.h); docs/drafter-training.md says why
  double weight_decay = 0.01;
  double max_grad_norm = 1.0;
  uint32_t window = 256;  // same-position objective only
  uint64_t train_seed = 0;
  // What the drafter learns: "auto" and "dflash" are DFlash (CPU and GPU drafters);
  // "same-position" (it does not draft) only when named.
  std::string objective = "auto";
  uint32_t draft_layers = 0;  // 0: per target (train/dflash_config.h)
  uint32_t block_size = 16;
  uint32_t anchors = 0;        // per batch; 0: scaled to the batch's tokens
  double loss_gamma = 0;       // 0: 7 for B 16, in proportion to B
  int64_t mask_token_id = -1;  // -1: chosen from the target's tokenizer (choose_mask_token)
  std::string labels = "data";

  // Several machines (docs/drafter-training.md): one launcher each, their drafters one
  // NCCL group. Given neither flag, from torchrun's or Slurm's environment (main.cc).
  uint32_t nnodes = 1;
  uint32_t node_rank = 0;
  std::string rendezvous_dir;  // "" : RUN_DIR/rendezvous

  // Ring shape.
  uint32_t slots = 16;
  uint32_t max_tokens = 512;
  uint32_t hidden_size = 0;  // 0: the model's, or 256 for synthetic batches
  uint32_t num_layers = 0;   // captured layers K; 0: as many as --layers names, else 5
  std::string dtype = "bf16";
  bool split_layers = true;
  uint32_t hs_min_ready = 2;
  bool deterministic = false;  // ordered claims (RingShape::ordered_claims)

  // Stop conditions: whichever comes first. With neither, the default batch count.
  uint64_t batches = 0;
  double seconds = 0;

  // Workers.
  double target_rate = 0;  // batches/s per target, 0 = unlimited
  double drafter_step_ms = 0;

  // GPU workers (docs/gpu-data-path.md).
  std::string target_publish = "after-copy";  // GPU targets: after-copy or early (IPC events)
  uint32_t target_postprocess_depth = 1;  // batches in copy/publish per target; buffers = depth + 1
  double gemm_flops_per_batch = 0;        // forward compute standing in for a model
  double noise_std = 0;
  std::string noise_schedule = "constant";  // or linear:START,END,STEPS

  // Supervision.
  uint32_t max_restarts = 5;
  double restart_window_s = 60;
  // Seconds workers get to finish at a stop; 0: automatic, 10, or 300 when drafters train
  // (their last checkpoint and the export: 14 GB for the qwen3-8b drafter).
  double drain_timeout_s = 0;
  // A running worker whose heartbeat has not moved for this many seconds is hung: the
  // launcher SIGKILLs it and restarts it as a crash (docs/operations.md, "Hung workers").
  // 0: off.
  double hang_timeout_s = 300;
  // Workers log their stage timings every this many seconds; 0: off. Given neither as a
  // flag nor in the config, HSRING_PROFILE_INTERVAL (worker/profile_interval.h).
  double profile_interval_s = 0;

  std::string summary_json;
  std::string metrics_file;  // Prometheus text, rewritten atomically every second
  std::string log_dir;       // one log file per worker (role-index.log), appended across restarts
  bool keep_ring = false;
  bool quiet = false;

  // Written by the launcher for its drafters (resolve_worker_options), never read from its own
  // command line: flags of the drafters only (worker/run_flag_table.cc).
  uint64_t total_steps = 0;    // where the drafters' cosine decay ends (training_plan.h)
  std::string drafter_export;  // the export: a DFlash folder, or the same-position safetensors
};

// True when the targets run a model (not synthetic batches).
inline bool runs_model(const RunOptions& options) { return options.model != "synthetic"; }

}  // namespace hsring
