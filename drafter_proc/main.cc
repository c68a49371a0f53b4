// hsring-drafter: one drafter process. In verify mode it checks every batch it consumes.
#include "common/worker_main.h"
#include "drafter_proc/drafter_worker.h"

int main(int argc, char** argv) {
  using namespace hsring;
  CLI::App app{"hsring drafter worker: consumes hidden states from a ring", "hsring-drafter"};
  WorkerFlags flags;
  DrafterOptions options;
  app.add_option("--step-ms", options.step_ms, "Simulated training time per batch, ms")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", options.seed, "Seed of the random pull");
  return worker_main(app, flags, Role::kDrafter, argc, argv, [&](WorkerSession& session) {
    return DrafterWorker(session, options).run();
  });
}
