#include "launcher/user_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <sstream>

#include "common/contract.h"
#include "common/regular_file.h"
#include "worker/profile_interval.h"

namespace hsring {

const std::string& user_command_of(const RunOptions& options, Role role) {
  return role == Role::kTarget ? options.target_cmd : options.drafter_cmd;
}

UserWorkerCommand user_worker_command(const RunOptions& options, Role role, uint32_t index, int gpu,
                                      uint32_t epoch, const std::string& bin_dir) {
  HSRING_REQUIRE(!user_command_of(options, role).empty());
  UserWorkerCommand c;
  // Through the shell, so a command line is written as a user would type it. dash and
  // bash exec a lone command in place; for any other the launcher signals the whole
  // process group, so nothing of the command outlives its worker.
  c.argv = {"/bin/sh", "-c", user_command_of(options, role)};
  c.env = {{"HSRING_RING", options.ring},
           {"HSRING_ROLE", to_string(role)},
           {"HSRING_INDEX", std::to_string(index)},
           {"HSRING_EPOCH", std::to_string(epoch)},
           {"HSRING_LIB", bin_dir + "/libhsring.so"},
           {"HSRING_BIN_DIR", bin_dir}};
  if (gpu >= 0) {
    c.env.emplace_back("CUDA_VISIBLE_DEVICES", std::to_string(gpu));
    // The machine's GPU id (CUDA_VISIBLE_DEVICES renumbers it 0): for status and the log.
    c.env.emplace_back("HSRING_GPU", std::to_string(gpu));
  }
  if (runs_model(options)) c.env.emplace_back("HSRING_MODEL", options.model);
  // The launcher's resolved value, as hsring's own workers get it with --profile-interval;
  // even 0 while the inherited variable is set (libhsring reads the variable).
  if (options.profile_interval_s > 0 || std::getenv(kProfileIntervalEnv) != nullptr) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.17g", options.profile_interval_s);
    c.env.emplace_back(kProfileIntervalEnv, seconds);
  }
  if (role == Role::kTarget) {
    // What hsring-target's shard reader is given as flags (worker/run_flag_table.cc).
    if (!options.data.empty()) c.env.emplace_back("HSRING_DATA", options.data);
    c.env.emplace_back("HSRING_DATA_SEED", std::to_string(options.data_seed));
    c.env.emplace_back("HSRING_READ_AHEAD", std::to_string(options.read_ahead));
    c.env.emplace_back("HSRING_NNODES", std::to_string(options.nnodes));
    c.env.emplace_back("HSRING_NODE_RANK", std::to_string(options.node_rank));
  }
  return c;
}

std::string last_log_lines(const std::string& path, size_t lines) {
  // Only the log's end is read: a long run's log may be large.
  constexpr off_t kTailBytes = 64 << 10;
  const RegularFileOpen opened = try_open_regular_file(path);
  if (opened.fd < 0) return "  (its log " + path + " cannot be read: " + opened.problem + ")";
  const off_t size = ::lseek(opened.fd, 0, SEEK_END);
  std::string tail(size_t(std::clamp<off_t>(size, 0, kTailBytes)), '\0');
  const ssize_t got = ::pread(opened.fd, tail.data(), tail.size(), size - off_t(tail.size()));
  ::close(opened.fd);
  tail.resize(size_t(std::max<ssize_t>(got, 0)));
  std::istringstream in(tail);
  std::deque<std::string> last;
  std::string line;
  while (std::getline(in, line)) {
    last.push_back(line);
    if (last.size() > lines) last.pop_front();
  }
  if (last.empty()) return "  (its log " + path + " is empty)";
  std::string text;
  for (const std::string& l : last) text += "\n  | " + l;
  return text;
}

}  // namespace hsring
