#include "common/worker_main.h"

#include <exception>
#include <stdexcept>

#include "common/log.h"
#include "common/signals.h"

namespace hsring {

std::optional<int> run_worker_setup(const std::function<void()>& setup) {
  try {
    setup();
    return std::nullopt;
  } catch (const std::invalid_argument& e) {
    log_line(std::string("error: ") + e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    log_line(std::string("error: ") + e.what());
    return kExitRingError;
  }
}

int worker_main(CLI::App& app, WorkerFlags& flags, Role role, int argc, char** argv,
                const std::function<int(WorkerSession&)>& body) {
  app.add_option("--ring", flags.ring, "Name of the ring segment to attach to")->required();
  app.add_option("--index", flags.index, "This worker's index within its role (0-based)")
      ->required();
  app.add_option("--lock-wait-ms", flags.lock_wait_ms,
                 "How long to wait for a dying predecessor of this index to let go")
      ->check(CLI::Range(0, 600000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  install_stop_handlers();
  die_with_launcher();
  const std::string role_name = to_string(role);
  set_log_prefix(role_name + " " + std::to_string(flags.index));
  try {
    auto ring = Ring::attach(flags.ring);
    const uint32_t process_index =
        role == Role::kTarget ? flags.index : ring->shape().num_targets + flags.index;
    if (role == Role::kTarget && flags.index >= ring->shape().num_targets) {
      throw RingError(RingErrc::kBadShape, "ring '" + flags.ring + "' has " +
                                               std::to_string(ring->shape().num_targets) +
                                               " targets; --index " + std::to_string(flags.index) +
                                               " does not exist");
    }
    if (role == Role::kDrafter && flags.index >= ring->shape().num_drafters) {
      throw RingError(RingErrc::kBadShape, "ring '" + flags.ring + "' has " +
                                               std::to_string(ring->shape().num_drafters) +
                                               " drafters; --index " + std::to_string(flags.index) +
                                               " does not exist");
    }
    auto session = WorkerSession::start(std::move(ring), process_index, role,
                                        std::chrono::milliseconds(flags.lock_wait_ms));
    set_log_prefix(role_name + " " + std::to_string(flags.index) + " e" +
                   std::to_string(session->identity().epoch));
    return body(*session);
  } catch (const RingError& e) {
    log_line(std::string("error: ") + e.what());
    return kExitRingError;
  } catch (const std::exception& e) {
    log_line(std::string("internal error: ") + e.what());
    return kExitInternal;
  }
}

}  // namespace hsring
