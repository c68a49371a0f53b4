#include "launcher/run_options.h"

#include <stdexcept>

namespace hsring {

void add_run_flags(CLI::App& app, RunOptions& o) {
  app.add_option("--ring", o.ring, "Name of the ring segment (in /dev/shm)")->capture_default_str();
  app.add_option("--targets", o.targets, "Targets: cpu:N, or GPU ids like 0,1")->capture_default_str();
  app.add_option("--drafters", o.drafters, "Drafters: cpu:N, or GPU ids like 2")->capture_default_str();
  app.add_option("--slots", o.slots, "Slots in the ring")->capture_default_str()->check(CLI::Range(2u, kMaxSlots));
  app.add_option("--max-tokens", o.max_tokens, "Tokens per slot")->capture_default_str()->check(CLI::Range(1u, 1u << 20));
  app.add_option("--hidden-size", o.hidden_size, "Hidden size H of the target")->capture_default_str()->check(CLI::Range(1u, 1u << 16));
  app.add_option("--num-layers", o.num_layers, "Captured layers K")->capture_default_str()->check(CLI::Range(1u, kMaxCapturedLayers));
  app.add_option("--dtype", o.dtype, "Hidden-state dtype")->capture_default_str()->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  app.add_flag("!--no-split-fc-layers", o.split_layers, "Store the K layers as one [T, K*H] region instead of K regions");
  app.add_option("--hs-min-ready", o.hs_min_ready, "Drafters wait for this many READY slots, then pull one at random")->capture_default_str()->check(CLI::Range(1u, kMaxSlots));
  app.add_option("--batches", o.batches, "Stop after this many batches are consumed (0: no batch limit)")->capture_default_str()->check(CLI::Range(uint64_t(0), uint64_t(1) << 28));
  app.add_option("--seconds", o.seconds, "Stop after this many seconds (0: no time limit)")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--target-rate", o.target_rate, "Batches per second per target (0: unlimited)")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--drafter-step-ms", o.drafter_step_ms, "Simulated drafter work per batch, ms")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--target-postprocess-depth", o.target_postprocess_depth, "GPU targets: batches copied and published behind the forward at once; capture buffers = depth + 1")->capture_default_str()->check(CLI::Range(1u, 16u));
  app.add_option("--gemm-flops-per-batch", o.gemm_flops_per_batch, "GPU targets: bf16 GEMM work per forward, standing in for a model (e.g. 2e13)")->capture_default_str()->check(CLI::Range(0.0, 1e18));
  app.add_option("--noise-std", o.noise_std, "GPU drafters: std of the Gaussian noise added to hidden states")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--noise-schedule", o.noise_schedule, "GPU drafters: constant, or linear:START,END,STEPS over each drafter's steps")->capture_default_str();
  app.add_option("--max-restarts", o.max_restarts, "Crashes of one worker within --restart-window that stop the run")->capture_default_str()->check(CLI::Range(1u, 1u << 30));
  app.add_option("--restart-window", o.restart_window_s, "Crash-loop window, seconds")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--drain-timeout", o.drain_timeout_s, "Seconds workers get to finish at stop before SIGKILL")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--summary-json", o.summary_json, "Write the run's summary as JSON to this path");
  app.add_option("--metrics-file", o.metrics_file, "Rewrite this file every second with Prometheus metrics (node_exporter textfile collector)");
  app.add_option("--log-dir", o.log_dir, "Write each worker's log to DIR/ROLE-INDEX.log instead of stderr");
  app.add_flag("--keep-ring", o.keep_ring, "Leave the segment in /dev/shm at exit (for inspection)");
  app.add_flag("--quiet,-q", o.quiet, "No progress line");
}

RingShape ring_shape_of(const RunOptions& o, const WorkerSpec& targets, const WorkerSpec& drafters) {
  RingShape s;
  s.slot_count = o.slots;
  s.max_tokens = o.max_tokens;
  s.hidden_size = o.hidden_size;
  s.num_layers = o.num_layers;
  s.dtype = o.dtype == "fp32" ? DType::kFP32 : o.dtype == "fp16" ? DType::kFP16 : DType::kBF16;
  s.split_layers = o.split_layers ? 1 : 0;
  s.num_targets = targets.count;
  s.num_drafters = drafters.count;
  s.hs_min_ready = o.hs_min_ready;
  for (uint32_t k = 0; k < s.num_layers; ++k) s.layer_ids[k] = int32_t(k);
  const bool unbounded = o.batches == 0 && o.seconds > 0;
  s.batch_limit = unbounded ? 0 : (o.batches ? o.batches : kDefaultRunBatches);
  s.ledger_capacity = std::max<uint64_t>(s.batch_limit, 1u << 20);
  return s;
}

RestartLimits restart_limits_of(const RunOptions& o) {
  RestartLimits limits;
  limits.max_crashes = o.max_restarts;
  limits.window_ns = uint64_t(o.restart_window_s * 1e9);
  return limits;
}

}  // namespace hsring
