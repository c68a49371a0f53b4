#include "launcher/user_command.h"

#include <unistd.h>

#include <algorithm>
#include <deque>
#include <sstream>

#include "common/contract.h"
#include "common/regular_file.h"
#include "worker/run_flags.h"

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
  // Its place in the run, which hsring's own workers get as flags of their own...
  c.env = {{"HSRING_ROLE", to_string(role)},
           {"HSRING_INDEX", std::to_string(index)},
           {"HSRING_EPOCH", std::to_string(epoch)},
           {"HSRING_LIB", bin_dir + "/libhsring.so"},
           {"HSRING_BIN_DIR", bin_dir}};
  if (gpu >= 0) {
    c.env.emplace_back("CUDA_VISIBLE_DEVICES", std::to_string(gpu));
    // The machine's GPU id (CUDA_VISIBLE_DEVICES renumbers it 0): for status and the log.
    c.env.emplace_back("HSRING_GPU", std::to_string(gpu));
  }
  // ... and the run's flags that reach its role, declared with their variable in the flag
  // table (worker/run_flag_table.cc): the ring, the model, the data options, the profile
  // period the launcher resolved (0 too, over an inherited variable).
  for (auto& [name, value] : run_flag_environment(options, role, gpu >= 0))
    c.env.emplace_back(std::move(name), std::move(value));
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
