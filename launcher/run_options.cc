#include "launcher/run_options.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "common/cli_checks.h"
#include "common/error.h"
#include "model/model_config.h"
#include "model/target_model.h"
#include "shm/ring.h"
#include "worker/node_topology.h"
#include "worker/profile_interval.h"

namespace hsring {

void add_run_flags(CLI::App& app, RunOptions& o) {
  app.add_option("--ring", o.ring, "Name of the ring segment (in /dev/shm)")
      ->capture_default_str()
      ->check(ring_name_check());
  app.add_option("--targets", o.targets,
                 "Targets: cpu:N, or GPU ids like 0,1 (given neither this nor --drafters on a GPU "
                 "machine: every GPU, targets:drafters 5:3)")
      ->capture_default_str();
  app.add_option("--drafters", o.drafters, "Drafters: cpu:N, or GPU ids like 2")
      ->capture_default_str();
  app.add_option("--target-cmd", o.target_cmd,
                 "Run this shell command as each target instead of hsring-target (a PyTorch "
                 "target through python/hsring); it gets HSRING_RING, HSRING_ROLE, HSRING_INDEX, "
                 "HSRING_EPOCH and CUDA_VISIBLE_DEVICES");
  app.add_option("--drafter-cmd", o.drafter_cmd,
                 "Run this shell command as each drafter instead of hsring-drafter");
  app.add_option("--attach-timeout", o.attach_timeout_s,
                 "Seconds a --target-cmd / --drafter-cmd worker may take to attach to the ring")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--model", o.model,
                 "Target model: builtin (a small target trained on the built-in corpus on first "
                 "use), tiny, qwen3-8b, qwen3.6-27b, qwen3-dense-27b (random weights), a Hugging "
                 "Face folder, or "
                 "synthetic (verifiable made-up batches)")
      ->capture_default_str();
  app.add_option("--model-seed", o.model_seed, "Seed of a preset model's random weights")
      ->capture_default_str();
  app.add_option("--data", o.data,
                 "Folder of token shards (hsring data pack), or builtin: the built-in target's "
                 "continuations of the built-in corpus; default: builtin with --model builtin, "
                 "else the built-in corpus");
  app.add_option("--eval-prompts", o.eval_prompts,
                 "Prompts of the end-of-run evaluation (as `hsring eval --prompts`: a token-shard "
                 "folder or JSONL chats); default: held-out documents of --data, or the built-in "
                 "held-out prompts");
  app.add_flag("!--no-eval", o.end_eval,
               "End the run without decoding its export (`hsring eval --drafter RUN/export` "
               "does it later)");
  app.add_flag("!--no-verify-data", o.verify_data,
               "Skip reading every token of --data before the run (its checksums and vocabulary; "
               "headers and offsets are still checked, token values as batches are built)");
  app.add_option("--data-seed", o.data_seed, "Seed of the batch packing and epoch order")
      ->capture_default_str();
  app.add_option("--layers", o.layers,
                 "Captured layer ids, e.g. 1,16,31,46,61 (default: K spread from layer 1 to L-3)");
  app.add_option("--read-ahead", o.read_ahead,
                 "Batches each target reads ahead of its forward (io_uring)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 256u));
  app.add_option("--run-dir", o.run_dir,
                 "Folder for checkpoints and the exported drafter (default: hsring-runs/RING-TIME; "
                 "under systemd /var/lib/hsring/RING)");
  // Not CLI11's excludes(): a config file lists every key, so both would always be "given"
  // (training_plan() refuses the two non-empty together).
  app.add_option("--resume", o.resume,
                 "Continue the run whose checkpoint folder this is (RUN_DIR/checkpoints)");
  app.add_option("--checkpoint-dir", o.checkpoint_dir,
                 "Folder for the drafter's checkpoints (default: RUN_DIR/checkpoints; not with "
                 "--resume, which continues in its own)");
  app.add_option("--checkpoint-every", o.checkpoint_every,
                 "Drafter steps between checkpoints (0: only at the end)")
      ->capture_default_str();
  app.add_option("--eval-every", o.eval_every,
                 "Drafter steps between held-out evaluations (loss, teacher-forced tau) written "
                 "to the curves as eval/... (0: none; CPU drafters)")
      ->capture_default_str();
  app.add_option("--keep-checkpoints", o.keep_checkpoints, "Checkpoints kept (newest first)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1000u));
  app.add_option("--lr", o.lr, "Drafter peak learning rate (AdamW)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--min-lr", o.min_lr, "Learning rate at the end of the cosine decay")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--warmup-steps", o.warmup_steps, "Linear warmup steps")->capture_default_str();
  app.add_option("--adam-beta2", o.adam_beta2, "AdamW's second-moment decay")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.999999));
  app.add_option("--weight-decay", o.weight_decay, "AdamW's decoupled weight decay")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--max-grad-norm", o.max_grad_norm,
                 "Clip the gradient's global norm to this (0: never)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--window", o.window, "Drafter sliding attention window, tokens")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--train-seed", o.train_seed, "Seed of the drafter's initial weights")
      ->capture_default_str();
  app.add_option("--objective", o.objective,
                 "What the drafter learns: dflash (blocks it drafts), same-position (the target's "
                 "own next token; does not draft), auto (dflash)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "dflash", "same-position"}));
  app.add_option("--draft-layers", o.draft_layers,
                 "DFlash: draft decoder layers (0: 5, or 1 for a target narrower than 1024)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 64u));
  app.add_option("--block-size", o.block_size,
                 "DFlash: block size B (the anchor and B - 1 drafted tokens)")
      ->capture_default_str()
      ->check(CLI::Range(2u, 64u));
  app.add_option("--anchors", o.anchors,
                 "DFlash: blocks per batch (0: 512 at 16384 tokens, in proportion)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 1u << 20));
  app.add_option(
         "--loss-gamma", o.loss_gamma,
         "DFlash: decay of the loss weight exp(-(j-1)/gamma) over block positions (0: 7 at B 16)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--mask-token-id", o.mask_token_id,
                 "DFlash: the token of the masked block positions (-1: chosen from the target's "
                 "tokenizer, else the vocabulary's last row; docs/dflash-export.md)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(-1), int64_t(1) << 31));
  app.add_option("--labels", o.labels,
                 "DFlash: what block positions predict: data (the data's next token) or target "
                 "(the target's greedy token)")
      ->capture_default_str()
      ->check(CLI::IsMember({"data", "target"}));
  app.add_option("--nnodes", o.nnodes,
                 "Machines whose drafters train one model, one launcher each (default: torchrun's "
                 "or Slurm's, else 1)")
      ->capture_default_str()
      ->check(CLI::Range(1u, kMaxNodes));
  app.add_option("--node-rank", o.node_rank,
                 "This machine's rank, 0 to NNODES-1 (node 0's drafter 0 writes the checkpoints)")
      ->capture_default_str()
      ->check(CLI::Range(0u, kMaxNodes - 1));
  app.add_option("--rendezvous-dir", o.rendezvous_dir,
                 "With --nnodes: the folder every machine sees where the drafter group meets "
                 "(default: RUN_DIR/rendezvous)");
  app.add_option("--slots", o.slots, "Slots in the ring")
      ->capture_default_str()
      ->check(CLI::Range(2u, kMaxSlots));
  app.add_option("--max-tokens", o.max_tokens, "Tokens per slot")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--hidden-size", o.hidden_size,
                 "Hidden size H of synthetic batches (0: 256; a model's is its own)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 1u << 16));
  app.add_option("--num-layers", o.num_layers,
                 "Captured layers K (0: as many as --layers names, else 5)")
      ->capture_default_str()
      ->check(CLI::Range(0u, kMaxCapturedLayers));
  app.add_option("--dtype", o.dtype, "Hidden-state dtype")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  app.add_flag("!--no-split-fc-layers", o.split_layers,
               "Store the K layers as one [T, K*H] region instead of K regions");
  app.add_option("--hs-min-ready", o.hs_min_ready,
                 "Drafters wait for this many READY slots, then pull one at random")
      ->capture_default_str()
      ->check(CLI::Range(1u, kMaxSlots));
  app.add_flag("--deterministic", o.deterministic,
               "Drafters consume batches in the order of their ids, so the same flags and seeds "
               "give the same drafter (slower: docs/drafter-training.md, \"Deterministic runs\")");
  app.add_option("--batches", o.batches,
                 "Stop after this many batches are consumed (0: no batch limit)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t(0), uint64_t(1) << 28));
  app.add_option("--seconds", o.seconds, "Stop after this many seconds (0: no time limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--target-rate", o.target_rate, "Batches per second per target (0: unlimited)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--drafter-step-ms", o.drafter_step_ms, "Simulated drafter work per batch, ms")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--target-publish", o.target_publish,
                 "GPU targets: publish a slot once its D2H completed (after-copy), or as soon as "
                 "it is enqueued with a CUDA IPC event that drafters poll (early; "
                 "docs/gpu-data-path.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"after-copy", "early"}));
  app.add_option("--target-postprocess-depth", o.target_postprocess_depth,
                 "GPU targets: batches copied and published behind the forward at once; capture "
                 "buffers = depth + 1")
      ->capture_default_str()
      ->check(CLI::Range(1u, 16u));
  app.add_option("--gemm-flops-per-batch", o.gemm_flops_per_batch,
                 "GPU targets: bf16 GEMM work per forward, standing in for a model (e.g. 2e13)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e18));
  app.add_option("--noise-std", o.noise_std,
                 "GPU drafters: std of the Gaussian noise added to hidden states")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--noise-schedule", o.noise_schedule,
                 "GPU drafters: constant, or linear:START,END,STEPS over each drafter's steps")
      ->capture_default_str();
  app.add_option("--max-restarts", o.max_restarts,
                 "Crashes of one worker within --restart-window that stop the run")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 30));
  app.add_option("--restart-window", o.restart_window_s, "Crash-loop window, seconds")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--drain-timeout", o.drain_timeout_s,
                 "Seconds workers get to finish at stop before SIGKILL (0: 10, or 300 when "
                 "drafters train and write their last checkpoint)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--hang-timeout", o.hang_timeout_s,
                 "Seconds a running worker may go without a heartbeat before the launcher kills "
                 "and restarts it as hung (0: never)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--summary-json", o.summary_json, "Write the run's summary as JSON to this path");
  app.add_option(
      "--metrics-file", o.metrics_file,
      "Rewrite this file every second with Prometheus metrics (node_exporter textfile collector)");
  app.add_option("--log-dir", o.log_dir,
                 "Write each worker's log to DIR/ROLE-INDEX.log instead of stderr");
  app.add_flag("--keep-ring", o.keep_ring,
               "Leave the segment in /dev/shm at exit (for inspection)");
  app.add_flag("--quiet,-q", o.quiet, "No progress line");
  add_profile_interval_flag(app, o.profile_interval_s)->capture_default_str();
  refuse_non_finite_numbers(app);
}

CLI::Validator ring_name_check() {
  return CLI::Validator([](std::string& name) { return ring_name_problem(name); }, "");
}

namespace {

std::vector<int32_t> parse_layer_list(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    long value = -1;
    try {
      value = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || value < 0 || value > (1 << 20))
      throw Error(Errc::kUsage, "--layers: '" + item +
                                    "' is not a layer id: give comma-separated ids like 1,16,31");
    ids.push_back(int32_t(value));
  }
  if (ids.empty()) throw Error(Errc::kUsage, "--layers names no layer: give ids like 1,16,31");
  return ids;
}

// Sets the model-dependent part of the shape: hidden size, vocabulary, captured layers.
void apply_model(const RunOptions& o, const WorkerSpec& targets, RingShape& s) {
  ModelConfig config;
  try {
    // Targets that are user commands run the model themselves: hsring's processes need
    // only its outline, whatever the architecture. Its own targets refuse here, before
    // anything starts, what their forward cannot run.
    if (!o.target_cmd.empty()) {
      config = model_outline_of(o.model);
    } else {
      config = model_config_of(o.model);
      if (std::string why = targets.cpu ? "" : cuda_forward_refusal(config); !why.empty())
        throw Error(Errc::kModelBadConfig, why);
    }
  } catch (Error& e) {
    // A model error keeps its code and class (exit 2); a usage error names the flag itself.
    if (e.layer() == ErrorClass::kModel) e.prepend("--model: ");
    throw;
  }
  if (o.hidden_size != 0 && o.hidden_size != config.hidden_size)
    throw Error(Errc::kUsage, "--hidden-size " + std::to_string(o.hidden_size) +
                                  " differs from the model's " +
                                  std::to_string(config.hidden_size) + ": leave it out");
  std::vector<int32_t> ids;
  if (!o.layers.empty()) {
    ids = parse_layer_list(o.layers);
    if (o.num_layers != 0 && o.num_layers != ids.size())
      throw Error(Errc::kUsage, "--num-layers " + std::to_string(o.num_layers) +
                                    " but --layers names " + std::to_string(ids.size()) +
                                    ": give one of them");
  } else {
    // Unasked, as many as the model has below its last layer, up to the default (a small
    // model has fewer; default_capture_layers says why not the last).
    const uint32_t k = o.num_layers
                           ? o.num_layers
                           : std::min(kDefaultCapturedLayers, std::max(config.num_layers, 2u) - 1);
    if (k > config.num_layers)
      throw Error(Errc::kUsage, "--num-layers " + std::to_string(k) + " exceeds the model's " +
                                    std::to_string(config.num_layers) + " layers");
    ids = capture_layers_for(config, k);  // full-attention layers of a hybrid model
  }
  if (ids.size() > kMaxCapturedLayers)
    throw Error(Errc::kUsage, "--layers names " + std::to_string(ids.size()) +
                                  " layers; a ring holds at most " +
                                  std::to_string(kMaxCapturedLayers));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (uint32_t(ids[i]) >= config.num_layers)
      throw Error(Errc::kUsage, "--layers: layer " + std::to_string(ids[i]) +
                                    " is outside the model's " + std::to_string(config.num_layers) +
                                    " layers (ids 0.." + std::to_string(config.num_layers - 1) +
                                    ")");
    if (std::find(ids.begin(), ids.begin() + i, ids[i]) != ids.begin() + i)
      throw Error(Errc::kUsage, "--layers: layer " + std::to_string(ids[i]) + " is named twice");
    s.layer_ids[i] = ids[i];
  }
  s.num_layers = uint32_t(ids.size());
  s.hidden_size = config.hidden_size;
  s.vocab_size = config.vocab_size;
  s.content = PayloadContent::kModel;
}

}  // namespace

RingShape ring_shape_of(const RunOptions& o, const WorkerSpec& targets,
                        const WorkerSpec& drafters) {
  RingShape s;
  s.slot_count = o.slots;
  s.max_tokens = o.max_tokens;
  s.hidden_size = o.hidden_size ? o.hidden_size : kSyntheticHiddenSize;
  s.num_layers = o.num_layers ? o.num_layers : kDefaultCapturedLayers;
  if (!runs_model(o) && !o.layers.empty())
    throw Error(
        Errc::kUsage,
        "--layers needs a model (--model tiny, ...); synthetic batches number their layers 0..K-1");
  s.dtype = o.dtype == "fp32" ? DType::kFP32 : o.dtype == "fp16" ? DType::kFP16 : DType::kBF16;
  s.split_layers = o.split_layers ? 1 : 0;
  s.num_targets = targets.count;
  s.num_drafters = drafters.count;
  s.hs_min_ready = o.hs_min_ready;
  for (uint32_t k = 0; k < s.num_layers; ++k) s.layer_ids[k] = int32_t(k);
  if (runs_model(o)) apply_model(o, targets, s);
  const bool unbounded = o.batches == 0 && o.seconds > 0;
  const uint64_t default_batches = runs_model(o) ? kDefaultModelRunBatches : kDefaultRunBatches;
  s.batch_limit = unbounded ? 0 : (o.batches ? o.batches : default_batches);
  s.ledger_capacity = std::max<uint64_t>(s.batch_limit, 1u << 20);
  if (o.deterministic) {
    if (s.batch_limit == 0)
      throw Error(Errc::kUsage,
                  "--deterministic needs --batches: a run that ends at a time (--seconds alone) "
                  "trains on however many batches arrived by then");
    s.ordered_claims = 1;
  }
  return s;
}

RestartLimits restart_limits_of(const RunOptions& o) {
  RestartLimits limits;
  limits.max_crashes = o.max_restarts;
  limits.window_ns = uint64_t(o.restart_window_s * 1e9);
  return limits;
}

}  // namespace hsring
