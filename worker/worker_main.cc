#include "worker/worker_main.h"

#include <fmt/format.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <vector>

#include "common/cli_checks.h"
#include "common/error.h"
#include "common/log.h"
#include "common/signals.h"
#include "common/syscheck.h"
#include "worker/profile_interval.h"
#include "worker/run_flags.h"
#include "worker/session_duties.h"

namespace hsring {

std::optional<int> run_worker_setup(const std::function<void()>& setup) {
  try {
    setup();
    return std::nullopt;
  } catch (const Error& e) {
    log_line(std::string("error: ") + e.what());
    return exit_code_of(e.layer());
  } catch (const std::exception& e) {
    log_line(std::string("error: ") + e.what());
    return exit_code_of(ErrorClass::kSystem);
  }
}

std::string worker_log_prefix(Role role, uint32_t index, int gpu, uint32_t epoch) {
  std::string prefix = fmt::format("{} {}", to_string(role), index);
  if (gpu >= 0) prefix += fmt::format(" gpu {}", gpu);
  if (epoch > 0) prefix += fmt::format(" epoch {}", epoch);
  return prefix;
}

std::unique_ptr<WorkerSession> start_worker_session(const std::string& ring_name, Role role,
                                                    uint32_t index,
                                                    std::chrono::milliseconds lock_wait) {
  auto ring = Ring::attach(ring_name);
  const RingShape& shape = ring->shape();
  const uint32_t count = role == Role::kTarget ? shape.num_targets : shape.num_drafters;
  if (index >= count) {
    throw Error(Errc::kRingBadShape, fmt::format("ring '{}' has {} {}s; --index {} does not exist",
                                                 ring_name, count, to_string(role), index));
  }
  const uint32_t process_index = role == Role::kTarget ? index : shape.num_targets + index;
  return WorkerSession::start(std::move(ring), process_index, role, lock_wait);
}

namespace {

constexpr char kIndexFlag[] = "--index";
constexpr char kGpuFlag[] = "--gpu";

// Replaces this process with `program` from this program's own folder, same arguments.
// Returns only when it could not: nullopt when the program is not there (this build has
// no GPU workers), else the exit code after logging why.
std::optional<int> exec_sibling(const std::string& program, int argc, char** argv) {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) {
    log_line("error: cannot find this program's folder to start " + program + ": " +
             error.message());
    return kExitInternal;
  }
  std::string path = (self.parent_path() / program).string();
  if (::access(path.c_str(), X_OK) != 0) return std::nullopt;
  std::vector<char*> args(argv, argv + argc);
  args[0] = path.data();
  args.push_back(nullptr);
  ::execv(path.c_str(), args.data());
  log_line(fmt::format("error: cannot start {}: {}", path, errno_text(errno)));
  return kExitInternal;
}

}  // namespace

std::vector<std::string> worker_place_argv(uint32_t index, int gpu) {
  std::vector<std::string> argv = {kIndexFlag, fmt::format("{}", index)};
  if (gpu >= 0) argv.insert(argv.end(), {kGpuFlag, fmt::format("{}", gpu)});
  return argv;
}

int worker_main(CLI::App& app, WorkerFlags& flags, Role role, int argc, char** argv,
                const std::function<int(WorkerSession&)>& body) {
  add_flags_of(app, flags.run, role == Role::kTarget ? kTargets : kDrafters);
  app.get_option("--ring")->required();
  app.add_option(kIndexFlag, flags.index, "This worker's index within its role (0-based)")
      ->required();
  app.add_option(kGpuFlag, flags.gpu, "GPU id to run on (default: CPU mode)")
      ->check(CLI::Range(0, 1023));
  app.add_option("--lock-wait-ms", flags.lock_wait_ms,
                 "How long to wait for a dying predecessor of this index to let go")
      ->check(CLI::Range(0, 600000));
  refuse_non_finite_numbers(app);  // --lr nan would fail later, or silently
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  const int gpu = flags.gpu;
  if (gpu >= 0 && !flags.gpu_program.empty()) {
    if (const std::optional<int> failed = exec_sibling(flags.gpu_program, argc, argv))
      return *failed;
  }
  install_stop_handlers();
  die_with_launcher();
  set_log_prefix(worker_log_prefix(role, flags.index, gpu, 0));
  try {
    if (app.count("--profile-interval") == 0)
      flags.run.profile_interval_s = profile_interval_from_env();
  } catch (const Error& e) {
    log_line(std::string("error: ") + e.what());
    return exit_code_of(e.layer());
  }
  try {
    auto session = start_worker_session(flags.run.ring, role, flags.index,
                                        std::chrono::milliseconds(flags.lock_wait_ms));
    set_log_prefix(worker_log_prefix(role, flags.index, gpu, session->identity().epoch));
    attach_session_duties(*session, uint64_t(flags.run.profile_interval_s * 1e9), log_line);
    const std::string ring_name = flags.run.ring;
    session->on_ring_damage([ring_name](const std::string& damage) {
      log_line("error: ring '" + ring_name + "' changed under the run (" + damage +
               "): another process wrote into the segment; stopping");
      request_stop();
    });
    const int code = body(*session);
    return session->ring_damaged() ? int(kExitRingError) : code;
  } catch (const Error& e) {
    log_line(std::string("error: ") + e.what());
    return exit_code_of(e.layer());
  } catch (const std::exception& e) {  // not hsring's own: a bug
    log_line(std::string("internal error: ") + e.what());
    return kExitInternal;
  }
}

}  // namespace hsring
