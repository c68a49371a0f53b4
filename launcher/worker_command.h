// The command line of one worker process, built in one place for both ways workers start:
// spawned by `hsring run`, or exec'd by a systemd unit through `hsring run --exec-worker`.
#pragma once

#include <string>
#include <vector>

#include "launcher/run_options.h"
#include "shm/ring_layout.h"

namespace hsring {

// argv for worker `index` (within `role`) on `gpu` (-1: CPU mode); argv[0] is the path of
// the worker program in `bin_dir`.
std::vector<std::string> worker_argv(const RunOptions& options, Role role, uint32_t index, int gpu,
                                     const std::string& bin_dir);

}  // namespace hsring
