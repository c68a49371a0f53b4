#include "launcher/supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include "checkpoint/dflash_export.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/syscheck.h"
#include "drafter_proc/grad_exchange.h"
#include "eval/eval_command.h"
#include "launcher/data_preflight.h"
#include "launcher/metrics.h"
#include "launcher/preflight.h"
#include "launcher/slot_census.h"
#include "launcher/training_plan.h"
#include "launcher/user_command.h"
#include "launcher/worker_command.h"
#include "launcher/worker_logs.h"
#include "shm/consumer.h"
#include "shm/futex.h"
#include "shm/ledger.h"
#include "shm/liveness.h"
#include "shm/recovery.h"
#include "worker/worker_main.h"

namespace hsring {

namespace {

constexpr uint64_t kProgressPeriodNs = 1'000'000'000;
constexpr uint64_t kStopCheckPeriodNs = 100'000'000;
// Long enough for the peers that leave too to be gone, short next to a step.
constexpr uint64_t kGroupRestartDelayNs = 20'000'000;

std::string format_rate(double value, const char* unit) {
  std::ostringstream out;
  out.precision(value >= 100 ? 0 : 1);
  out << std::fixed;
  if (value >= 1e9)
    out << value / 1e9 << " G";
  else if (value >= 1e6)
    out << value / 1e6 << " M";
  else if (value >= 1e3)
    out << value / 1e3 << " K";
  else
    out << value << " ";
  out << unit;
  return out.str();
}

void wake_all_waiters(Ring& ring) {
  RingHeader& h = ring.header();
  SharedCondition(h.ready_futex, h.ready_waiters).notify_all();
  SharedCondition(h.free_futex, h.free_waiters).notify_all();
}

}  // namespace

std::string Supervisor::Worker::name() const {
  return fmt::format("{} {}", to_string(role), index);
}

Supervisor::Supervisor(RunOptions options, std::string bin_dir)
    : options_(std::move(options)), bin_dir_(std::move(bin_dir)) {
  const WorkerSpec targets = parse_worker_spec(options_.targets, "--targets");
  const WorkerSpec drafters = parse_worker_spec(options_.drafters, "--drafters");
  RingShape shape = ring_shape_of(options_, targets, drafters);
  if (std::string why = validate_shape(shape); !why.empty())
    throw Error(Errc::kUsage, "cannot run this ring: " + why);
  // Before the ring exists and any worker starts: CUDA build, /dev/shm, memlock, GPU ids,
  // slot budget of GPU targets, noise schedule, token data.
  preflight_run(options_, targets, drafters, shape);
  check_target_data(options_, shape);
  check_multi_node(options_, drafters);
  TrainingPlan training;
  if (runs_model(options_)) {
    // Several CPU drafters train one model together, averaging gradients through
    // drafter_proc/grad_exchange.h; each step takes one batch per drafter (training_plan.cc).
    resolve_run_dir(options_);
    training = prepare_training(options_, shape);
    options_.total_steps = training.total_steps;
    // The ring counts batches from 0; its data continues where the checkpoint was, on a
    // multiple of the targets so each keeps its residue.
    shape.data_offset = training.next_data_batch - training.next_data_batch % targets.count;
  }
  if (options_.drain_timeout_s == 0) options_.drain_timeout_s = runs_model(options_) ? 300 : 10;

  // Signals arrive through a signalfd polled beside the pidfds: no async handler races.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigprocmask(SIG_BLOCK, &signals, nullptr);
  signal_fd_ =
      syscheck(signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK), Errc::kSystem, "signalfd");

  if (!options_.log_dir.empty()) prepare_log_folder(options_.log_dir);
  // Folders first: a --run-dir that cannot be made must fail before there is a ring to leak.
  if (runs_model(options_)) create_run_folder();
  ring_ = Ring::create(options_.ring, shape);
  // The destructor does not run for a constructor that throws: whatever fails from here on
  // removes the ring it made, or the next run would find it "already exists".
  try {
    // A new ring starts a new drafter group: an exchange left by a crashed run would belong
    // to another ring (the drafters refuse it), so it goes before any worker starts.
    GradExchange::remove(GradExchange::name_for(options_.ring));
    if (!try_hold_liveness_lock(ring_->fd(), kLauncherLockIndex))
      throw Error(Errc::kRingProcessBusy,
                  fmt::format("cannot take the launcher lock of ring '{}'", options_.ring));
    ring_->header().launcher_pid.store(::getpid(), std::memory_order_relaxed);
    if (runs_model(options_)) start_training(training);
  } catch (...) {
    if (!options_.keep_ring) Ring::remove(options_.ring);
    throw;
  }

  const RestartLimits limits = restart_limits_of(options_);
  for (uint32_t t = 0; t < targets.count; ++t) {
    const int gpu = targets.cpu ? -1 : targets.gpus[t];
    workers_.push_back(Worker{Role::kTarget, t, gpu, {}, RestartPolicy(limits)});
  }
  for (uint32_t d = 0; d < drafters.count; ++d) {
    const int gpu = drafters.cpu ? -1 : drafters.gpus[d];
    workers_.push_back(Worker{Role::kDrafter, d, gpu, {}, RestartPolicy(limits)});
  }
  for (Worker& w : workers_) w.user_command = !user_command_of(options_, w.role).empty();
}

void Supervisor::create_run_folder() const {
  // The export goes here even when the checkpoints go elsewhere (--checkpoint-dir).
  std::error_code ec;
  std::filesystem::create_directories(options_.run_dir, ec);
  if (ec)
    throw Error(Errc::kSystem, options_.run_dir,
                "cannot create the run folder: " + ec.message() + "; give another --run-dir");
}

void Supervisor::start_training(const TrainingPlan& plan) {
  log_line(fmt::format("run folder {}: checkpoints every {} steps in {}", options_.run_dir,
                       options_.checkpoint_every, plan.checkpoint_dir));
  if (options_.nnodes > 1)
    log_line(
        fmt::format("node {0} of {1}: these drafters train one model with every node's "
                    "(NCCL), meeting in {2}; its targets read data batches {0} + {1}k",
                    options_.node_rank, options_.nnodes, plan.rendezvous_dir));
  if (plan.resume_step == 0) return;
  log_line(fmt::format("resuming from step {} of {}; data from batch {}", plan.resume_step,
                       options_.resume, ring_->shape().data_offset));
}

Supervisor::~Supervisor() {
  for (Worker& w : workers_) {
    if (w.process.running()) {
      w.process.signal(SIGKILL);
      if (w.user_command) w.process.signal_group(SIGKILL);
      int status;
      while (!w.process.try_reap(status)) ::usleep(1000);
    }
  }
  if (ring_ && !options_.keep_ring) Ring::remove(options_.ring);
  if (ring_) GradExchange::remove(GradExchange::name_for(options_.ring));
  if (signal_fd_ >= 0) ::close(signal_fd_);
}

std::string Supervisor::log_path_of(const Worker& w) {
  const std::string file = std::string(to_string(w.role)) + "-" + std::to_string(w.index) + ".log";
  if (!options_.log_dir.empty()) return options_.log_dir + "/" + file;
  if (!w.user_command) return "";
  if (user_log_dir_.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    user_log_dir_ = create_private_log_folder(tmp && *tmp ? tmp : "/tmp", options_.ring);
    log_line("user command workers log to " + user_log_dir_ + " (--log-dir chooses the folder)");
  }
  return user_log_dir_ + "/" + file;
}

void Supervisor::start_worker(Worker& w) {
  w.log_path = log_path_of(w);
  w.attached_before = w.attached_before || (w.spawned_ns != 0 && attached(w));
  // Before the spawn: the child bumps the epoch when it attaches, so until the epoch moves
  // the entry is the predecessor's (its state may still say running). Relaxed loads: the
  // predecessor is dead (reaped) and nothing else writes the entry until the spawn.
  w.epoch_at_spawn = entry_of(w).epoch.load(std::memory_order_relaxed);
  w.batches_at_spawn = entry_of(w).batches.load(std::memory_order_relaxed);
  w.heartbeat_seen = 0;
  w.heartbeat_seen_at_ns = 0;
  w.killed_as_hung = false;
  w.spawned_ns = monotonic_ns();
  if (w.user_command) {
    const UserWorkerCommand c =
        user_worker_command(options_, w.role, w.index, w.gpu, w.epoch_at_spawn + 1, bin_dir_);
    w.process = ChildProcess::spawn(c.argv, w.log_path, c.env);
  } else {
    w.process =
        ChildProcess::spawn(worker_argv(options_, w.role, w.index, w.gpu, bin_dir_), w.log_path);
  }
  w.policy.on_start(monotonic_ns());
  w.restart_at_ns = 0;
}

bool Supervisor::attached(const Worker& w) const {
  return entry_of(w).epoch.load(std::memory_order_relaxed) != w.epoch_at_spawn;
}

void Supervisor::check_user_attach(Worker& w, bool exited, int wait_status) {
  if (!w.user_command || !setup_failure_.empty() || attached(w)) return;
  if (exited && w.attached_before && killed_by_signal(wait_status)) return;  // a crash
  const uint64_t waited = monotonic_ns() - w.spawned_ns;
  if (!exited && waited < uint64_t(options_.attach_timeout_s * 1e9)) return;
  std::ostringstream why;
  why << w.name() << ": its command '" << user_command_of(options_, w.role) << "' ";
  if (exited)
    why << describe_wait_status(wait_status) << " before attaching to ring '" << options_.ring
        << "'";
  else
    why << "did not attach to ring '" << options_.ring << "' within " << options_.attach_timeout_s
        << " s (--attach-timeout); killed it";
  why << ". Its last log lines (" << w.log_path << "):" << last_log_lines(w.log_path, 10);
  setup_failure_ = why.str();
  if (!exited) {
    w.process.signal(SIGKILL);
    w.process.signal_group(SIGKILL);
  }
}

void Supervisor::on_worker_exit(Worker& w, int wait_status) {
  // The child's liveness lock is gone before its pidfd turns readable: recover now.
  const RecoveryStats recovered = recover_dead_owners(*ring_);
  const bool running =
      ring_->header().run_state.load(std::memory_order_acquire) == uint32_t(RunState::kRunning);
  if (!running || interrupted_) return on_exit_while_draining(w, wait_status);
  check_user_attach(w, true, wait_status);
  if (!setup_failure_.empty()) return;
  const uint64_t now = monotonic_ns();
  if (w.role == Role::kDrafter && WIFEXITED(wait_status) &&
      WEXITSTATUS(wait_status) == kExitGroupRestart) {
    // A drafter left its group because a peer died or restarted: the peer's crash was
    // counted already, so this one is not counted, and it restarts at once to reload the
    // newest checkpoint. (A peer that keeps crashing stops the run through its own count.)
    w.restart_at_ns = now + kGroupRestartDelayNs;
    ++group_restarts_;
    if (!options_.quiet || group_restarts_ <= 3)
      log_line(w.name() + " left its drafter group; restarting it from the newest checkpoint");
    return;
  }
  if (w.role == Role::kDrafter && WIFEXITED(wait_status) &&
      WEXITSTATUS(wait_status) == kExitGroupStopped) {
    // Across machines: another machine's run ended, and the drafter group with it.
    log_line(w.name() + ": the drafter group stopped on another machine; stopping this run");
    group_stopped_ = true;
    return;
  }
  if (w.role == Role::kDrafter && WIFEXITED(wait_status) &&
      WEXITSTATUS(wait_status) == kExitNonFinite) {
    // Not a crash to retry: a restart would load the last checkpoint and train into the
    // same values again, or crash-loop. Its log line names the batch and the step.
    non_finite_message_ = w.name() +
                          " stopped training on a loss that is not finite (its "
                          "error above names the batch and the step): stopping the run";
    log_line(non_finite_message_);
    return;
  }
  if (!w.user_command && WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == kExitUsage) {
    // Its own classified error: a flag, the model or checkpoint folder, the data (usage,
    // model, checkpoint, data: exit_code_of). A restart reads the same input and fails the
    // same way, so the run stops with that class's code instead of crash-looping into 3.
    // A user command's exit status is its own program's, not this table's: restarted.
    input_error_message_ = w.name() +
                           " exited 2, an error a restart cannot fix (its error above names "
                           "the flag, the file or the full disk); stopping the run";
    log_line(input_error_message_);
    return;
  }
  // Relaxed: the worker is dead and reaped; its last count came before its exit. A worker
  // killed as hung failed by itself, whatever it did before: one that hangs again and again
  // is a crash loop.
  const bool made_progress =
      !w.killed_as_hung &&
      entry_of(w).batches.load(std::memory_order_relaxed) != w.batches_at_spawn;
  if (!w.policy.on_crash(now, made_progress)) {
    crash_loop_ = true;
    crash_loop_message_ = fmt::format(
        "{} crashed {} times within {} s (last: {}{}): crash loop, stopping the run. Raise "
        "--max-restarts or --restart-window to tolerate more, or fix the cause in its log",
        w.name(), w.policy.crashes_in_window(), int(options_.restart_window_s),
        w.killed_as_hung ? "hung, " : "", describe_wait_status(wait_status));
    return;
  }
  w.restart_at_ns = now + w.policy.restart_delay_ns();
  ++w.restarts;
  (w.role == Role::kTarget ? restarts_target_ : restarts_drafter_)++;
  if (!options_.quiet || w.restarts <= 3) {
    log_line(fmt::format("{}{}{}; recovered {} slot(s); restarting in {} ms", w.name(),
                         w.killed_as_hung ? " (hung) " : " ", describe_wait_status(wait_status),
                         recovered.total(), w.policy.restart_delay_ns() / 1'000'000));
  }
}

void Supervisor::on_exit_while_draining(const Worker& w, int wait_status) {
  if (w.role != Role::kDrafter || !runs_model(options_)) return;  // nothing left to save
  // A user command's shell may die of the drain's own SIGTERM while the drafter it started
  // finishes (the drain waits for the command's whole process group): for a command only an
  // exit status of its own says that it failed.
  if (w.user_command && !WIFEXITED(wait_status)) return;
  const int code = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1;
  // A group member that stopped because its group or another machine did: its leader saves.
  if (code == kExitOk || code == kExitGroupStopped || code == kExitGroupRestart) return;
  if (code == kExitNonFinite) {
    non_finite_message_ = w.name() +
                          " met a loss that is not finite in its last steps (its "
                          "error above names the batch and the step)";
    return;
  }
  if (!work_not_saved_.empty()) work_not_saved_ += "; ";
  work_not_saved_ += w.name() + " " + describe_wait_status(wait_status) +
                     " while finishing the run, so its final checkpoint or export is missing "
                     "(its error above says which and why)";
}

ProcessEntry& Supervisor::entry_of(const Worker& w) const {
  return ring_->process(w.role == Role::kTarget ? w.index : ring_->shape().num_targets + w.index);
}

void Supervisor::kill_hung_workers() {
  if (options_.hang_timeout_s <= 0) return;
  const uint64_t timeout_ns = uint64_t(options_.hang_timeout_s * 1e9);
  const uint64_t now = monotonic_ns();
  for (Worker& w : workers_) {
    if (!w.process.running() || w.killed_as_hung) continue;
    const ProcessEntry& entry = entry_of(w);
    // Relaxed loads: each is compared only; a stale value delays the verdict by a turn.
    const uint64_t beat = entry.heartbeat_unix_ns.load(std::memory_order_relaxed);
    // The clock runs only while this incarnation is attached and running: exec, attach,
    // model loading and GPU setup (kStarting) are not a hang, however long they take.
    const bool running =
        entry.epoch.load(std::memory_order_relaxed) != w.epoch_at_spawn &&
        entry.pid.load(std::memory_order_relaxed) == w.process.pid() &&
        entry.state.load(std::memory_order_relaxed) == uint32_t(ProcessState::kRunning);
    if (!running || beat != w.heartbeat_seen || w.heartbeat_seen_at_ns == 0) {
      w.heartbeat_seen = running ? beat : 0;
      w.heartbeat_seen_at_ns = running ? now : 0;
      continue;
    }
    const uint64_t silent_ns = now - w.heartbeat_seen_at_ns;
    if (silent_ns < timeout_ns) continue;
    std::ostringstream line;
    line.precision(1);
    line << std::fixed << w.name() << " (pid " << w.process.pid() << ") is hung: no heartbeat for "
         << double(silent_ns) / 1e9 << " s (--hang-timeout " << options_.hang_timeout_s
         << "); killing it, its slots are recovered once it is dead";
    log_line(line.str());
    // The death comes back through the pidfd in run()'s poll; recovery waits for it.
    w.process.signal(SIGKILL);
    w.killed_as_hung = true;
  }
}

void Supervisor::restart_due_workers() {
  const uint64_t now = monotonic_ns();
  for (Worker& w : workers_) {
    if (!w.process.running() && w.restart_at_ns != 0 && now >= w.restart_at_ns) start_worker(w);
  }
}

bool Supervisor::stop_condition_met() {
  if (deadline_ns_ != 0 && monotonic_ns() >= deadline_ns_) return true;
  const uint64_t limit = ring_->shape().batch_limit;
  return limit != 0 && ledger_count_consumed(*ring_, limit) >= limit;
}

int Supervisor::poll_timeout_ms() const {
  uint64_t wait = kStopCheckPeriodNs;
  const uint64_t now = monotonic_ns();
  for (const Worker& w : workers_) {
    if (!w.process.running() && w.restart_at_ns != 0)
      wait = std::min(wait, w.restart_at_ns > now ? w.restart_at_ns - now : 0);
  }
  return int((wait + 999'999) / 1'000'000);
}

void Supervisor::print_progress() {
  const uint64_t now = monotonic_ns();
  if (now < next_progress_ns_) return;
  next_progress_ns_ = now + kProgressPeriodNs;
  uint64_t batches = 0, tokens = 0, bytes = 0;
  for (uint32_t i = ring_->shape().num_targets; i < ring_->process_count(); ++i) {
    batches += ring_->process(i).batches.load(std::memory_order_relaxed);
    tokens += ring_->process(i).tokens.load(std::memory_order_relaxed);
    bytes += ring_->process(i).hs_bytes.load(std::memory_order_relaxed);
  }
  const SlotCensus census = take_slot_census(*ring_);
  const uint32_t* by_phase = census.by_phase;
  // A corrupt slot is named once; the progress line keeps counting them.
  if (census.corrupt > 0 && !corrupt_slots_logged_) {
    corrupt_slots_logged_ = true;
    for (const std::string& problem : census.problems) log_line("error: " + problem);
  }
  const double elapsed = double(now - started_ns_) / 1e9;
  const double interval = double(now - last_progress_ns_) / 1e9;
  const double batch_rate = interval > 0 ? double(batches - last_progress_batches_) / interval : 0;
  last_progress_batches_ = batches;
  last_progress_ns_ = now;
  write_metrics();
  if (options_.quiet) return;
  std::ostringstream line;
  line.precision(1);
  line << std::fixed << elapsed << " s  consumed " << batches << "  " << batch_rate
       << " batches/s  " << format_rate(double(tokens) / std::max(elapsed, 1e-9), "tok/s") << "  "
       << format_rate(double(bytes) / std::max(elapsed, 1e-9), "B/s") << "  slots free "
       << by_phase[0] << " claimed " << by_phase[1] << " writing " << by_phase[2] << " ready "
       << by_phase[3] << " reading " << by_phase[4]
       << (census.corrupt ? fmt::format(" corrupt {}", census.corrupt) : std::string())
       << "  restarts t " << restarts_target_ << " d " << restarts_drafter_;
  const TrainingProgress& training = ring_->header().training;
  if (training.started()) {
    line.precision(3);
    const float tau = TrainingProgress::value(training.acceptance_ema);
    line << "  step " << training.steps.load(std::memory_order_relaxed) << " loss "
         << TrainingProgress::value(training.loss_ema);
    if (tau > 0)  // the DFlash objective: tokens per target forward, teacher-forced
      line << " tau " << tau << " ";
    else
      line << " agree " << TrainingProgress::value(training.agreement_ema) << " ";
    line << training.step_us.load(std::memory_order_relaxed) / 1000 << " ms/step";
  }
  log_line(line.str());
}

void Supervisor::write_metrics() {
  if (options_.metrics_file.empty()) return;
  try {
    write_file_atomically(options_.metrics_file, render_prometheus(*ring_));
  } catch (const std::exception& e) {
    log_line(std::string("warning: ") + e.what());  // monitoring must not stop the run
  }
}

void Supervisor::evaluate_export(RunSummary& summary) {
  // A drafter that failed its last steps left no export of this run: what is there is older.
  if (!options_.end_eval || !runs_model(options_) || interrupted_ || crash_loop_ ||
      options_.node_rank != 0 || !work_not_saved_.empty() || !non_finite_message_.empty() ||
      !input_error_message_.empty())
    return;
  const Worker* drafter0 = nullptr;
  for (const Worker& w : workers_)
    if (w.role == Role::kDrafter && w.index == 0) drafter0 = &w;
  if (drafter0 == nullptr || drafter_objective(options_, drafter0->gpu >= 0) != "dflash") return;
  const std::string export_dir = training_plan(options_).export_dir;
  std::error_code ec;
  if (!std::filesystem::exists(export_dir, ec)) return;
  // The folder may be an earlier run's (this run wrote none): its quality is not this run's.
  const std::string problem = export_origin_problem(export_dir);
  if (!problem.empty()) {
    log_line("warning: not evaluating " + export_dir + ": " + problem);
    return;
  }
  // The user's prompts, else the held-out documents of the user's --data (which its
  // targets never read), else the built-in held-out prompts (the built-in corpus and the
  // built-in data, whose documents are the built-in training documents' continuations).
  eval::PromptChoice prompts;
  prompts.prompts = options_.eval_prompts;
  if (!options_.data_is_builtin) prompts.data = options_.data;
  log_line(fmt::format(
      "evaluating the exported drafter by speculative decoding ({}, on {})", export_dir,
      drafter0->gpu >= 0 ? fmt::format("GPU {}", drafter0->gpu) : std::string("the CPU")));
  try {
    // On drafter 0's GPU when it trained on one: the workers are gone, the GPU is free, and
    // a large target would take the CPU minutes a prompt.
    const eval::TrainedAgainstUntrained r =
        eval::evaluate_against_untrained(options_.model, options_.model_seed, export_dir,
                                         options_.train_seed, prompts, 0, drafter0->gpu);
    summary.evaluated = true;
    summary.acceptance_length = r.trained.acceptance_length;
    summary.acceptance_length_interval = r.trained.acceptance_length_interval;
    summary.untrained_acceptance_length = r.untrained.acceptance_length;
    summary.matches_greedy = r.trained.matches_greedy && r.untrained.matches_greedy;
    summary.eval_prompts = r.trained.prompts.size();
    summary.untrained_eval_prompts = r.untrained.prompts.size();
    summary.eval_prompts_source = r.prompts;
  } catch (const std::exception& e) {
    log_line("warning: could not evaluate the export: " + std::string(e.what()) +
             " (`hsring eval --drafter " + export_dir + "` retries)");
  }
}

std::string Supervisor::export_origin_problem(const std::string& export_dir) const {
  std::optional<checkpoint::DflashOrigin> origin;
  try {
    origin = checkpoint::read_dflash_origin(export_dir);
  } catch (const std::exception& e) {
    return e.what();
  }
  if (!origin) return "it does not say which run wrote it (no hsring_origin in its config.json)";
  if (origin->run != ring_->run_identity())
    return fmt::format(
        "it was written by another run ({}, step {}), not by this one ({}): this run wrote no "
        "export",
        origin->run, origin->step, ring_->run_identity());
  return "";
}

void Supervisor::drain() {
  for (const Worker& w : workers_) {
    // Its last incarnation crashed and the next was not started yet: the steps since its
    // last checkpoint are gone and nothing writes the final checkpoint or the export.
    if (w.role != Role::kDrafter || !runs_model(options_) || w.process.running() ||
        w.restart_at_ns == 0)
      continue;
    if (!work_not_saved_.empty()) work_not_saved_ += "; ";
    work_not_saved_ += w.name() +
                       " was down (restarting after a crash) when the run ended, so it wrote no "
                       "final checkpoint or export; its steps since its last checkpoint are lost";
  }
  ring_->header().run_state.store(uint32_t(RunState::kDraining), std::memory_order_release);
  wake_all_waiters(*ring_);
  for (Worker& w : workers_) {
    w.process.signal(SIGTERM);
    if (w.user_command) w.process.signal_group(SIGTERM);
  }
  const uint64_t deadline = monotonic_ns() + uint64_t(options_.drain_timeout_s * 1e9);
  while (monotonic_ns() < deadline) {
    bool any_running = false;
    for (Worker& w : workers_) {
      int status;
      if (w.process.running()) {
        if (!w.process.try_reap(status))
          any_running = true;
        else
          on_exit_while_draining(w, status);
      }
      // A user command's program may outlive its shell (ChildProcess::group_alive).
      if (w.user_command && !w.process.running() && w.process.group_alive()) any_running = true;
    }
    if (!any_running) break;
    ::usleep(2000);
  }
  for (Worker& w : workers_) {
    const bool group = w.user_command && w.process.group_alive();
    if (!w.process.running() && !group) continue;
    log_line(fmt::format("{} did not stop within {:f} s; killing it", w.name(),
                         options_.drain_timeout_s));
    w.process.signal(SIGKILL);
    if (group) w.process.signal_group(SIGKILL);
    int status;
    const bool was_running = w.process.running();
    while (w.process.running() && !w.process.try_reap(status)) ::usleep(1000);
    if (was_running) on_exit_while_draining(w, status);
  }
  recover_dead_owners(*ring_);
  ring_->header().run_state.store(uint32_t(RunState::kStopped), std::memory_order_release);
}

int Supervisor::run() {
  started_ns_ = monotonic_ns();
  last_progress_ns_ = started_ns_;
  next_progress_ns_ = started_ns_ + kProgressPeriodNs;
  if (options_.seconds > 0) deadline_ns_ = started_ns_ + uint64_t(options_.seconds * 1e9);
  const RingShape& s = ring_->shape();
  log_line(fmt::format(
      "ring '{}': {} slots of {} KiB; {} target(s), {} drafter(s); stop after {}{}{}",
      options_.ring, s.slot_count, ring_->layout().slot.stride >> 10, s.num_targets, s.num_drafters,
      s.batch_limit ? fmt::format("{} batches", s.batch_limit) : std::string(),
      s.batch_limit && deadline_ns_ ? " or " : "",
      deadline_ns_ ? fmt::format("{:f} s", options_.seconds) : std::string()));
  for (Worker& w : workers_) start_worker(w);

  std::vector<pollfd> fds;
  std::vector<Worker*> owners;
  while (!crash_loop_) {
    fds.assign(1, pollfd{signal_fd_, POLLIN, 0});
    owners.assign(1, nullptr);
    for (Worker& w : workers_) {
      if (w.process.running()) {
        fds.push_back(pollfd{w.process.pidfd(), POLLIN, 0});
        owners.push_back(&w);
      }
    }
    ::poll(fds.data(), fds.size(), poll_timeout_ms());
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      while (::read(signal_fd_, &info, sizeof info) == sizeof info) {
      }
      interrupted_ = true;
      log_line(std::string("received SIG") + sigabbrev_np(int(info.ssi_signo)) + ": draining");
      break;
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (!(fds[i].revents & POLLIN)) continue;
      // The leader is dead but unreaped, so its group id is still its own: whatever the
      // command left behind in the group goes with it (it may hold the index's lock).
      if (owners[i]->user_command) owners[i]->process.signal_group(SIGKILL);
      int status;
      if (owners[i]->process.try_reap(status)) on_worker_exit(*owners[i], status);
    }
    if (crash_loop_) break;
    for (Worker& w : workers_)
      if (w.process.running()) check_user_attach(w, false, 0);
    if (!setup_failure_.empty()) break;
    kill_hung_workers();
    restart_due_workers();
    print_progress();
    if (stop_condition_met() || group_stopped_ || !non_finite_message_.empty() ||
        !input_error_message_.empty())
      break;
    // Everything here reads the validated copy of the header, so a writer cannot steer
    // the launcher outside the mapping; but the run's promise no longer holds: stop it.
    ring_damage_ = ring_->check_intact();
    if (!ring_damage_.empty()) {
      log_line("error: ring '" + options_.ring + "' changed under the run (" + ring_damage_ +
               "): another process wrote into the segment; draining the run");
      break;
    }
  }
  drain();
  const double wall = double(monotonic_ns() - started_ns_) / 1e9;
  write_metrics();  // the final counters, for a scrape after the run
  RunSummary summary = summarize_run(*ring_, wall, restarts_target_, restarts_drafter_);
  evaluate_export(summary);
  log_line(summary_text(summary));
  if (!options_.summary_json.empty()) write_summary_json(summary, options_.summary_json);
  if (crash_loop_) {
    log_line("error: " + crash_loop_message_);
    return kRunCrashLoop;
  }
  if (!setup_failure_.empty()) {
    log_line("error: " + setup_failure_);
    return kRunSetupError;
  }
  if (!input_error_message_.empty()) {
    log_line("error: " + input_error_message_);
    return kRunUsage;
  }
  if (!ring_damage_.empty()) {
    log_line("error: the run stopped because its ring was changed by another process (" +
             ring_damage_ + "); start a new run (a fresh ring)");
    return kRunRingDamaged;
  }
  if (!non_finite_message_.empty()) {
    log_line("error: " + non_finite_message_);
    return kRunNonFinite;
  }
  if (!summary.data_intact()) {
    log_line("error: batches were torn, lost or duplicated; the run failed its promise");
    return kRunDataError;
  }
  if (summary.batches_consumed == 0 && !interrupted_) {
    // A run that ended on its own terms (its time or batch limit, or another machine's
    // stop) without a batch consumed did nothing: workers that fail at start, a mapping
    // refused under `ulimit -v`, a time limit shorter than the first batch.
    log_line(
        fmt::format("error: the drafters consumed no batch in {} s: the run did nothing "
                    "(the workers' errors above say why; a model run may need a longer "
                    "--seconds)",
                    int(wall)));
    return kRunNothingConsumed;
  }
  // After "nothing consumed": a run that trained nothing had no work to save.
  if (!work_not_saved_.empty()) {
    log_line("error: the run's work is not saved: " + work_not_saved_);
    return kRunWorkNotSaved;
  }
  return kRunOk;
}

}  // namespace hsring
