// Workers that are user commands (`hsring run --target-cmd '...' --drafter-cmd '...'`): a
// shell command line instead of hsring's own worker program, told its place in the run
// through the environment, which python/hsring's from_env() (or any C API caller) reads:
// HSRING_ROLE, HSRING_INDEX, HSRING_EPOCH (the epoch its start will open), CUDA_VISIBLE_DEVICES
// and HSRING_GPU for its GPU, HSRING_LIB (libhsring.so beside hsring), and the run's flags
// that the flag table gives a variable (run_flag_environment, worker/run_flags.h):
// HSRING_RING, HSRING_MODEL, HSRING_PROFILE_INTERVAL (libhsring writes the profile log) and
// the data options a target's shard reader needs. Supervision is the built-in workers' own.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "launcher/run_options.h"
#include "shm/ring_layout.h"

namespace hsring {

using Environment = std::vector<std::pair<std::string, std::string>>;

// The command given for `role`, or "" when that role runs hsring's own program.
const std::string& user_command_of(const RunOptions& options, Role role);

struct UserWorkerCommand {
  std::vector<std::string> argv;  // /bin/sh -c COMMAND
  Environment env;                // added to the launcher's own
};

// Worker `index` of `role` on `gpu` (-1: CPU), whose start opens epoch `epoch`.
// REQUIRES: !user_command_of(options, role).empty().
UserWorkerCommand user_worker_command(const RunOptions& options, Role role, uint32_t index, int gpu,
                                      uint32_t epoch, const std::string& bin_dir);

// The last `lines` lines of the file at `path` (each prefixed with "  | "), or a note
// that it cannot be read.
std::string last_log_lines(const std::string& path, size_t lines);

}  // namespace hsring
