// hsring: the launcher and operator tool. `hsring run` creates a ring and supervises its
// workers; `status`, `stop` and `ring inspect|remove` look after running or stale rings.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <climits>
#include <filesystem>
#include <iostream>

#include "common/log.h"
#include "launcher/run_options.h"
#include "launcher/status.h"
#include "launcher/supervisor.h"
#include "shm/liveness.h"
#include "shm/ring.h"

namespace {

using namespace hsring;

// The worker programs live beside this binary.
std::string program_dir() {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return ".";
  path[n] = '\0';
  return std::filesystem::path(path).parent_path().string();
}

bool any_process_alive(const Ring& ring) {
  if (liveness_lock_held_elsewhere(ring.fd(), kLauncherLockIndex)) return true;
  for (uint32_t i = 0; i < ring.process_count(); ++i)
    if (liveness_lock_held_elsewhere(ring.fd(), i)) return true;
  return false;
}

int stop_ring(const std::string& name) {
  auto ring = Ring::attach(name, Ring::Access::kReadOnly);
  if (!liveness_lock_held_elsewhere(ring->fd(), kLauncherLockIndex)) {
    std::cerr << "hsring stop: no launcher is running ring '" << name
              << "'; `hsring ring remove " << name << "` removes a stale segment\n";
    return 1;
  }
  const pid_t pid = ring->header().launcher_pid.load(std::memory_order_relaxed);
  if (pid <= 0 || ::kill(pid, SIGTERM) != 0) {
    std::cerr << "hsring stop: cannot signal the launcher (pid " << pid << ")\n";
    return 1;
  }
  std::cerr << "hsring stop: asked the launcher of ring '" << name << "' (pid " << pid
            << ") to drain and stop\n";
  return 0;
}

int remove_ring(const std::string& name, bool force) {
  try {
    auto ring = Ring::attach(name, Ring::Access::kReadOnly);
    if (any_process_alive(*ring) && !force) {
      std::cerr << "hsring ring remove: ring '" << name
                << "' still has live processes; `hsring stop --ring " << name
                << "` first, or --force to unlink it anyway\n";
      return 1;
    }
  } catch (const RingError& e) {
    // A foreign or corrupt segment can still be removed by its owner: say what it was.
    if (e.code() == RingErrc::kNotFound) throw;
    std::cerr << "hsring ring remove: note: " << e.what() << "\n";
  }
  if (!Ring::remove(name)) {
    std::cerr << "hsring ring remove: could not remove " << Ring::path_of(name) << "\n";
    return 1;
  }
  std::cerr << "removed ring '" << name << "'\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hsring: moves target hidden states to drafter training through a crash-safe "
               "shared-memory ring", "hsring"};
  app.require_subcommand(1);
  app.set_config("--config", "", "Read flags from a TOML/INI config file");

  RunOptions run_options;
  CLI::App* run = app.add_subcommand("run", "Create a ring, start and supervise its workers");
  add_run_flags(*run, run_options);

  std::string status_ring = "hsring";
  StatusOptions status_options;
  CLI::App* status = app.add_subcommand("status", "Show a ring's processes and slots (read-only)");
  status->add_option("--ring", status_ring, "Ring name")->capture_default_str();
  status->add_flag("--json", status_options.json, "JSON output");

  std::string stop_name = "hsring";
  CLI::App* stop = app.add_subcommand("stop", "Ask a ring's launcher to drain and stop");
  stop->add_option("--ring", stop_name, "Ring name")->capture_default_str();

  CLI::App* ring_cmd = app.add_subcommand("ring", "Inspect or remove ring segments");
  ring_cmd->require_subcommand(1);
  std::string inspect_name, remove_name;
  bool remove_force = false;
  CLI::App* inspect = ring_cmd->add_subcommand("inspect", "Validate a segment and show it");
  inspect->add_option("name", inspect_name, "Ring name")->required();
  CLI::App* remove = ring_cmd->add_subcommand("remove", "Remove a (stale) segment");
  remove->add_option("name", remove_name, "Ring name")->required();
  remove->add_flag("--force", remove_force, "Remove even while processes are alive");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kRunUsage;
  }

  set_log_prefix("hsring");
  try {
    if (*run) return Supervisor(run_options, program_dir()).run();
    if (*status) {
      std::cout << render_status(*Ring::attach(status_ring, Ring::Access::kReadOnly), status_options);
      return 0;
    }
    if (*stop) return stop_ring(stop_name);
    if (*inspect) {
      std::cout << render_status(*Ring::attach(inspect_name, Ring::Access::kReadOnly),
                                 StatusOptions{false, 0});
      return 0;
    }
    if (*remove) return remove_ring(remove_name, remove_force);
  } catch (const RingError& e) {
    std::cerr << "hsring: error: " << e.what() << "\n";
    return kRunSetupError;
  } catch (const std::invalid_argument& e) {
    std::cerr << "hsring: error: " << e.what() << "\n";
    return kRunUsage;
  } catch (const std::exception& e) {
    std::cerr << "hsring: error: " << e.what() << "\n";
    return kRunSetupError;
  }
  return 0;
}
