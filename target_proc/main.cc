// hsring-target: one target process. In CPU mode it produces synthetic hidden states.
#include "common/worker_main.h"
#include "target_proc/target_worker.h"

int main(int argc, char** argv) {
  using namespace hsring;
  CLI::App app{"hsring target worker: produces hidden states into a ring", "hsring-target"};
  WorkerFlags flags;
  TargetOptions options;
  app.add_option("--rate", options.batches_per_second,
                 "Batches per second this target produces (0: as fast as it can)")
      ->check(CLI::NonNegativeNumber);
  return worker_main(app, flags, Role::kTarget, argc, argv, [&](WorkerSession& session) {
    SyntheticSource source;
    return TargetWorker(session, source, options).run();
  });
}
