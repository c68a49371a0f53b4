// Everything `hsring run` can be told, with its defaults, and how the options become
// flags (and config-file keys, through CLI11's --config).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "launcher/restart_policy.h"
#include "launcher/worker_spec.h"
#include "shm/ring_layout.h"

namespace hsring {

struct RunOptions {
  std::string ring = "hsring";
  std::string targets = "cpu:2";
  std::string drafters = "cpu:1";

  // Ring shape.
  uint32_t slots = 16;
  uint32_t max_tokens = 512;
  uint32_t hidden_size = 256;
  uint32_t num_layers = 5;
  std::string dtype = "bf16";
  bool split_layers = true;
  uint32_t hs_min_ready = 2;

  // Stop conditions: whichever comes first. With neither, the default batch count.
  uint64_t batches = 0;
  double seconds = 0;

  // Workers.
  double target_rate = 0;  // batches/s per target, 0 = unlimited
  double drafter_step_ms = 0;

  // GPU workers (docs/gpu-data-path.md).
  uint32_t target_postprocess_depth = 1;  // batches in copy/publish per target; buffers = depth + 1
  double gemm_flops_per_batch = 0;        // forward compute standing in for a model
  double noise_std = 0;
  std::string noise_schedule = "constant";  // or linear:START,END,STEPS

  // Supervision.
  uint32_t max_restarts = 5;
  double restart_window_s = 60;
  double drain_timeout_s = 10;

  std::string summary_json;
  std::string metrics_file;  // Prometheus text, rewritten atomically every second
  std::string log_dir;       // one log file per worker (role-index.log), appended across restarts
  bool keep_ring = false;
  bool quiet = false;
};

// The batch count of a run given neither --batches nor --seconds: about half a minute
// of the default shape on a 2-core machine.
inline constexpr uint64_t kDefaultRunBatches = 12000;

void add_run_flags(CLI::App& app, RunOptions& options);

// The ring shape the options ask for, given the parsed worker specs.
// Throws std::invalid_argument for values no ring can have.
RingShape ring_shape_of(const RunOptions& options, const WorkerSpec& targets,
                        const WorkerSpec& drafters);
RestartLimits restart_limits_of(const RunOptions& options);

}  // namespace hsring
