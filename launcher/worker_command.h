// The command line of one worker process, built in one place for both ways workers start:
// spawned by `hsring run`, or exec'd by a systemd unit through `hsring run --exec-worker`.
// Which of the run's flags a worker gets, and how, is the flag table's
// (worker/run_flags.h); here the launcher resolves the values its workers need.
#pragma once

#include <string>
#include <vector>

#include "launcher/run_options.h"
#include "shm/ring_layout.h"

namespace hsring {

// `options` as a worker of `role` (on a GPU when `gpu`) is to get them: the drafters'
// training plan (checkpoint folder, export, rendezvous folder), the resolved objective,
// a warmup no longer than the run, and held-out curves only where their data was
// resolved. The one place where the launcher turns its defaults into its workers' values.
RunOptions resolve_worker_options(const RunOptions& options, Role role, bool gpu);

// argv for worker `index` (within `role`) on `gpu` (-1: CPU mode); argv[0] is the path of
// the worker program in `bin_dir`.
std::vector<std::string> worker_argv(const RunOptions& options, Role role, uint32_t index, int gpu,
                                     const std::string& bin_dir);

}  // namespace hsring
