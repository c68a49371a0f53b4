// The start-up and error handling that both worker programs share: flags common to both,
// stop handlers, attaching with a new epoch, log prefix, and the one place where setup
// exceptions become exit codes.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "shm/worker_session.h"
#include "worker/run_options.h"

// CLI11 is declared, not included: its header costs seconds of compile time in every
// file that includes it, and only the files that build a command line use it.
namespace CLI {
class App;
}  // namespace CLI

namespace hsring {

// A worker's flags: the run's that reach its role, declared with `hsring run`'s
// (worker/run_flag_table.cc), and its place in the run.
struct WorkerFlags {
  // --ring, --profile-interval (stage-timing log period; 0: off, worker/profile_interval.h)
  // and whatever else of the run reaches the role.
  RunOptions run;
  uint32_t index = 0;  // index within the role: target t, drafter d
  int gpu = -1;        // CPU mode
  int lock_wait_ms = 2000;
  // Set by the CPU build of a worker program: the GPU build beside it (e.g.
  // "hsring-target-gpu"), exec'd with the same arguments when --gpu is given, so the CPU
  // build never loads a CUDA library. Where it does not exist (a build without CUDA) the
  // CPU build runs on and refuses the GPU itself.
  std::string gpu_program;
};

// The log prefix of a worker: "target 0 gpu 3 epoch 2"; "drafter 1 epoch 4" in CPU mode
// (gpu < 0); without "epoch N" before it has one (epoch 0).
std::string worker_log_prefix(Role role, uint32_t index, int gpu, uint32_t epoch);

// Exit codes of worker processes (the launcher reports them by name). An Error ends a
// worker with its class's code from the one table, exit_code_of (common/error.h).
enum WorkerExit : int {
  kExitOk = 0,
  kExitUsage = exit_code_of(ErrorClass::kUsage),  // 2: also data, model, checkpoint
  kExitLostSlot = 3,
  kExitRingError = exit_code_of(ErrorClass::kRing),  // 4: also cuda, group, system
  kExitTorn = 5,
  // A CPU drafter left its gradient-exchange group (a peer died, restarted, or started
  // from a newer checkpoint): the launcher restarts it at once without counting a crash,
  // and it resumes from the newest checkpoint like every member (drafter_proc/grad_exchange.h).
  kExitGroupRestart = 6,
  // A drafter in a group across machines saw another machine's run stop (drain) the
  // group: it checkpointed where the group was, and the launcher stops this machine's run.
  kExitGroupStopped = 7,
  // A training drafter met a loss that is not finite (a diverged model, or hidden states
  // that are not finite); its log names the batch and the step. The launcher does not
  // restart it: it stops the run with an error (training would only repeat it).
  kExitNonFinite = 8,
  kExitInternal = 70,
};

// Runs a worker's setup (model, GPU, pinning, pipelines, checkpoint). An Error is logged and
// gives its class's exit code (exit_code_of: kExitUsage for a bad request such as a GPU
// that does not exist, a bad model or checkpoint folder), any other exception kExitRingError
// (class system); nullopt when the setup succeeded.
std::optional<int> run_worker_setup(const std::function<void()>& setup);

// Attaches to `ring_name` and starts worker `index` of `role` (an index within the role:
// target t, drafter d), refusing an index the ring does not have. Throws Error. What
// worker_main does for hsring's own workers, and the C API (capi/) for user workers.
std::unique_ptr<WorkerSession> start_worker_session(const std::string& ring_name, Role role,
                                                    uint32_t index,
                                                    std::chrono::milliseconds lock_wait);

// The flags that place a worker in its run, as worker_main parses them: --index, and --gpu
// when `gpu` >= 0. The launcher writes them with the run's (worker/run_flags.h).
std::vector<std::string> worker_place_argv(uint32_t index, int gpu);

// Adds the run's flags that reach `role` (into flags.run) and the worker's place (--index,
// --gpu, --lock-wait-ms) to `app`, which holds the program's own flags; parses; execs
// flags.gpu_program when --gpu is given and it is set; then runs `body` with a started
// session whose profile log is on when --profile-interval (or HSRING_PROFILE_INTERVAL) asks.
// Returns the exit code.
int worker_main(CLI::App& app, WorkerFlags& flags, Role role, int argc, char** argv,
                const std::function<int(WorkerSession&)>& body);

}  // namespace hsring
