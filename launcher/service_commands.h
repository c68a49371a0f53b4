// The pieces of `hsring run` that systemd units use one at a time: create the ring (and
// reuse a compatible one), remove it, and become one worker (exec, so systemd watches
// the worker process itself). All read the same [run] config as the launcher.
#pragma once

#include <string>

#include "launcher/run_options.h"

namespace hsring {

int create_ring_only(const RunOptions& options);
int remove_ring_only(const RunOptions& options);
// `role_instance` is "target:I" or "drafter:I"; I is the GPU id in GPU mode and the
// worker index in CPU mode (the systemd instance name). Returns only on error.
int exec_worker(const RunOptions& options, const std::string& role_instance,
                const std::string& bin_dir);

}  // namespace hsring
