// `hsring run`: creates the ring, starts one process per worker, and keeps them alive.
// A dead worker's slots are recovered the moment its pidfd reports the exit; the worker
// is restarted with exponential backoff; a crash loop stops the run. At the end (stop
// condition or SIGINT/SIGTERM) the ring drains: producers stop, drafters finish what they
// hold, and the segment is removed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "launcher/child_process.h"
#include "launcher/restart_policy.h"
#include "launcher/run_options.h"
#include "launcher/run_summary.h"
#include "shm/ring.h"

namespace hsring {

// Exit codes of `hsring run`. An Error ends hsring with its class's code from the one table,
// exit_code_of (common/error.h).
enum RunExit : int {
  kRunOk = 0,
  kRunDataError = 1,                             // a batch was torn, lost or duplicated
  kRunUsage = exit_code_of(ErrorClass::kUsage),  // 2: also data, model, checkpoint
  kRunCrashLoop = 3,
  kRunSetupError = exit_code_of(ErrorClass::kRing),  // 4: also cuda, group, system
  kRunNothingConsumed = 5,  // the run ended without its drafters consuming a single batch
  kRunNonFinite = 6,        // a drafter's training met a loss that is not finite
  // Another process changed the ring's header or truncated it while the run was live:
  // the run stopped (drained) with what was consumed so far accounted.
  kRunRingDamaged = 7,
  // A training drafter did not finish the run's work: it failed while writing its final
  // checkpoint or export (a full disk), did not stop within --drain-timeout, or was down
  // (restarting after a crash) when the run ended.
  kRunWorkNotSaved = 8,
};

struct TrainingPlan;

class Supervisor {
 public:
  // REQUIRES: the worker programs are in `bin_dir`. Throws on setup errors.
  Supervisor(RunOptions options, std::string bin_dir);
  ~Supervisor();
  int run();

 private:
  struct Worker {
    Role role;
    uint32_t index;  // within the role
    int gpu = -1;
    ChildProcess process;
    RestartPolicy policy;
    uint64_t restart_at_ns = 0;  // when dead: when to start it again
    uint32_t restarts = 0;
    // Hang detection (kill_hung_workers): the heartbeat last seen while this incarnation
    // was running, and when (monotonic) the launcher first saw that value. The clock is the
    // launcher's, so a step of the wall clock neither makes nor hides a hang.
    uint32_t epoch_at_spawn = 0;  // the table's epoch before this incarnation attached
    // The entry's batch count (published or consumed) at the spawn: a crash after it moved
    // (not a hang) is a worker killed while it worked, restarted fast (RestartPolicy::on_crash).
    uint64_t batches_at_spawn = 0;
    bool attached_before = false;  // an earlier incarnation in this run attached
    uint64_t heartbeat_seen = 0;
    uint64_t heartbeat_seen_at_ns = 0;
    bool killed_as_hung = false;  // SIGKILL sent; the pidfd reports the death
    bool user_command = false;    // --target-cmd / --drafter-cmd (launcher/user_command.h)
    uint64_t spawned_ns = 0;      // monotonic, for the user command's attach timeout
    std::string log_path;         // "" : stderr
    std::string name() const;
  };

  // Logs where training keeps its state and, for a resumed run, where it continues.
  // Throws Error(kSystem) naming --run-dir when it cannot be made.
  void create_run_folder() const;
  void start_training(const TrainingPlan& plan);
  void start_worker(Worker& worker);
  void on_worker_exit(Worker& worker, int wait_status);
  // A worker's exit once the run stopped running. A training drafter writes its final
  // checkpoint and export then, so any exit but a clean one means they are missing:
  // recorded in work_not_saved_ (or non_finite_message_), never ignored.
  void on_exit_while_draining(const Worker& worker, int wait_status);
  void restart_due_workers();
  // SIGKILLs each running worker whose heartbeat has not moved for --hang-timeout. Its
  // slots are recovered only when its pidfd reports the death (on_worker_exit), because a
  // stale owner must be dead before its slots are recovered (docs/ring-protocol.md).
  void kill_hung_workers();
  // A user command that exited before attaching, or has not attached within
  // --attach-timeout, is a setup error to report (with its log's last lines), not a crash
  // to retry: it would fail the same way again. Except a death by a signal of a command
  // that attached before in this run (the OOM killer strikes during a model load): that
  // is a crash, restarted with backoff.
  void check_user_attach(Worker& worker, bool exited, int wait_status);
  bool attached(const Worker& worker) const;
  // Where a worker logs: --log-dir, else stderr; user commands always to a file (their
  // last lines explain a failed start), in a folder of this run's when no --log-dir.
  std::string log_path_of(const Worker& worker);
  ProcessEntry& entry_of(const Worker& worker) const;
  bool stop_condition_met();
  void drain();
  void print_progress();
  void write_metrics();
  int poll_timeout_ms() const;

  RunOptions options_;
  std::string bin_dir_;
  std::unique_ptr<Ring> ring_;
  std::vector<Worker> workers_;
  int signal_fd_ = -1;
  uint64_t started_ns_ = 0;
  uint64_t deadline_ns_ = 0;  // 0: none
  uint64_t next_progress_ns_ = 0;
  uint64_t last_progress_batches_ = 0;
  uint64_t last_progress_ns_ = 0;
  bool crash_loop_ = false;
  std::string crash_loop_message_;
  bool interrupted_ = false;
  uint32_t restarts_target_ = 0;
  uint32_t restarts_drafter_ = 0;
  uint32_t group_restarts_ = 0;  // drafters that left their group (not crashes)
  bool group_stopped_ = false;   // another machine's run ended the drafter group
  std::string ring_damage_;      // what Ring::check_intact() found; "" while intact
  // A DFlash run's end: its export and the untrained drafter decoded speculatively on
  // --eval-prompts, the held-out documents of --data or the built-in held-out prompts, into
  // `summary` (nothing for other runs).
  void evaluate_export(RunSummary& summary);
  // "" when export `export_dir` was written by this run (its DflashOrigin names this ring's
  // run identity); else why its quality is not this run's to report.
  std::string export_origin_problem(const std::string& export_dir) const;
  bool corrupt_slots_logged_ = false;
  std::string non_finite_message_;  // set when a drafter exited with kExitNonFinite
  // Set when a worker of hsring's own exited kExitUsage: its input is wrong, not retried.
  std::string input_error_message_;
  std::string setup_failure_;   // a user command that failed to start (check_user_attach)
  std::string work_not_saved_;  // why a training drafter's final work is missing
  std::string user_log_dir_;    // user commands' logs without --log-dir
};

}  // namespace hsring
