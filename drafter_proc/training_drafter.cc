#include "drafter_proc/training_drafter.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/dflash_export.h"
#include "checkpoint/safetensors_export.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/signals.h"
#include "curves/training_curves.h"
#include "drafter_proc/busy_fractions.h"
#include "drafter_proc/drafter_worker.h"
#include "drafter_proc/grad_exchange.h"
#include "drafter_proc/held_out_set.h"
#include "drafter_proc/training_backend.h"
#include "drafter_proc/training_checkpoint.h"
#include "model/hf_tokenizer.h"
#include "model/target_head.h"
#include "model/target_model.h"
#include "shm/recovery.h"
#include "shm/stage_timer.h"
#include "train/dflash_mask_token.h"
#include "worker/batch_consumer.h"
#include "worker/model_batch_check.h"
#include "worker/node_topology.h"
#include "worker/worker_main.h"

namespace hsring {

namespace {

constexpr auto kClaimSlice = std::chrono::milliseconds(100);
constexpr double kEmaWeight = 0.05;  // ~20-step average for the live loss and agreement

uint32_t bits(double value) { return std::bit_cast<uint32_t>(float(value)); }

// The tokenizer of a target given as a Hugging Face folder; a preset has none.
std::optional<TokenizerVocab> target_tokenizer(const std::string& spec) {
  std::error_code ec;
  if (!std::filesystem::is_directory(spec, ec)) return std::nullopt;
  return read_tokenizer_vocab(spec);
}

class TrainingLoop {
 public:
  TrainingLoop(WorkerSession& session, const TrainingDrafterOptions& options)
      : session_(session), ring_(session.ring()), options_(options) {}

  // Builds the trainer and resumes from the checkpoint directory. Throws on bad setup.
  void set_up();
  int run();

 private:
  bool keep_running() const;
  // Drafter 0 of node 0 writes the checkpoints and the export ...
  bool leader() const { return rank_ == 0; }
  // ... and each node's drafter 0 its ring's progress.
  bool reports_progress() const { return local_rank_ == 0; }
  void join_group();
  // The DFlash trainer's options from the flags, with the target's frozen head loaded.
  train::DflashTrainerOptions dflash_options(const ModelConfig& target) const;
  PeerWatch peer_watch() const;
  std::function<bool()> keep_waiting();
  // The rest of a step on the copied batch whose gradients are `loss`'s: in a group their
  // all-reduce, then the update. kReduced when the update was applied.
  ExchangeResult step(const train::LossStats& loss, uint64_t start, train::StepStats& stats);
  // "" when the step on the copied batch may go on, else why training must stop: its loss
  // is not finite (a diverged model, or hidden states that are not finite).
  std::string non_finite_problem(const train::LossStats& loss) const;
  // Checks a claimed batch and copies it out of the ring: kCopied when the backend holds
  // it for a step, kTorn (marked so) when its metadata breaks the ring's invariants.
  enum class BatchCopy { kCopied, kTorn };
  BatchCopy copy_out(BatchConsumer& consumer, const ClaimedBatch& batch);
  void publish(const train::StepStats& stats);
  // Drafter 0 of node 0: appends the step to the run's curves, with the held-out
  // evaluation every eval_every steps.
  void record_curves(const train::StepStats& stats);
  // The held-out batches, when the curves get them (drafter 0 of node 0, --eval-every).
  void build_held_out_set();
  TrainingPosition position();
  void write_checkpoint();
  void finish();

  WorkerSession& session_;
  Ring& ring_;
  TrainingDrafterOptions options_;
  train::DrafterTrainer& trainer() { return backend_->trainer(); }

  std::unique_ptr<TrainingBackend> backend_;
  std::unique_ptr<checkpoint::CheckpointWriter> writer_;  // drafter 0's only
  uint32_t local_rank_ = 0;                               // the drafter index
  uint32_t rank_ = 0;  // in the group: node rank * drafters per node + local_rank_
  std::unique_ptr<GradientGroup> exchange_;  // with several drafters
  uint64_t exchange_step_ = 0;               // the next exchange's number
  uint64_t batches_before_ = 0;  // trained by earlier incarnations (from the checkpoint)
  uint64_t batches_ = 0;         // trained by this incarnation
  uint64_t last_checkpoint_step_ = 0;
  uint64_t trained_watermark_ = 0;  // ring batch ids below it are all consumed
  double loss_ema_ = -1, agreement_ema_ = 0, acceptance_ema_ = 0;
  uint64_t batch_id_ = 0;                           // of the batch last copied out of the ring
  std::unique_ptr<curves::TrainingCurves> curves_;  // the leader's, with a run folder
  std::optional<HeldOutSet> held_out_;              // the leader's, with --eval-every
  std::optional<BusyFractions> busy_;
  uint64_t curve_tokens_ = 0;   // TrainingProgress.tokens at the previous record
  uint64_t curve_time_ns_ = 0;  // and when it was read
};

void TrainingLoop::set_up() {
  const RingShape& s = ring_.shape();
  // The drafter never runs the target: any architecture's outline will do.
  const ModelConfig target = model_outline_of(options_.target_model);
  if (target.hidden_size != s.hidden_size || target.vocab_size != s.vocab_size)
    throw Error(Errc::kUsage,
                fmt::format("--model {} (hidden {}, vocab {}) is not the model this ring was "
                            "made for (hidden {}, vocab {})",
                            options_.target_model, target.hidden_size, target.vocab_size,
                            s.hidden_size, s.vocab_size));
  if (options_.objective == DrafterObjective::kDflash) {
    backend_ = options_.make_dflash_backend
                   ? options_.make_dflash_backend(dflash_options(target), ring_)
                   : make_cpu_dflash_backend(dflash_options(target));
  } else {
    train::SamePositionTrainerOptions trainer_options;
    trainer_options.model =
        train::default_same_position_config(target, s.num_layers, options_.window);
    trainer_options.optimizer = options_.optimizer;
    trainer_options.seed = options_.seed;
    trainer_options.threads = options_.threads;
    backend_ = options_.make_backend ? options_.make_backend(trainer_options, ring_)
                                     : make_cpu_training_backend(trainer_options);
  }
  local_rank_ = session_.identity().index - s.num_targets;
  rank_ = options_.node_rank * s.num_drafters + local_rank_;
  check_node_topology({options_.nnodes, options_.node_rank, "flags"});
  if (options_.nnodes > 1 && options_.rendezvous_dir.empty())
    throw Error(Errc::kUsage,
                fmt::format("--nnodes {} needs --rendezvous-dir: a folder every node sees",
                            options_.nnodes));
  log_line(fmt::format(
      "training drafter {} {}; lr {:f}, warmup {}, cosine to step {}", trainer().describe(),
      backend_->describe(), options_.optimizer.schedule.peak_lr,
      options_.optimizer.schedule.warmup_steps, options_.optimizer.schedule.total_steps));
  if (options_.checkpoint_dir.empty()) {
    join_group();
    return;
  }
  // The directory's newest valid checkpoint, if any: a restarted drafter continues. In a
  // group every member loads it, so all replicas start from the same state.
  std::error_code ec;
  const bool exists = std::filesystem::exists(options_.checkpoint_dir, ec);
  if (auto loaded = exists ? checkpoint::load_latest(options_.checkpoint_dir) : std::nullopt) {
    for (const checkpoint::RejectedCheckpoint& r : loaded->rejected)
      log_line("warning: skipped damaged checkpoint: " + r.reason);
    const TrainingPosition position = restore_training(loaded->checkpoint, trainer());
    batches_before_ = position.batches_trained;
    last_checkpoint_step_ = loaded->checkpoint.step;
    log_line(fmt::format("resumed from {} at step {}", loaded->path, loaded->checkpoint.step));
  }
  join_group();
  // Only drafter 0 writes checkpoints (the writer locks the directory); the others read it.
  if (!leader()) return;
  checkpoint::WriterOptions writer_options;
  writer_options.keep_last = options_.keep_checkpoints;
  writer_ = std::make_unique<checkpoint::CheckpointWriter>(options_.checkpoint_dir, writer_options);
  ring_.header().training.checkpoint_step.store(last_checkpoint_step_, std::memory_order_relaxed);
}

train::DflashTrainerOptions TrainingLoop::dflash_options(const ModelConfig& target) const {
  const DflashChoices& c = options_.dflash;
  train::DflashTrainerOptions o;
  const uint32_t layers = c.draft_layers ? c.draft_layers : train::default_draft_layers(target);
  o.model = train::default_dflash_config(target, ring_.shape().num_layers, layers);
  o.model.block_size = c.block_size;
  o.model.loss_gamma = c.loss_gamma > 0 ? c.loss_gamma : train::default_loss_gamma(c.block_size);
  const std::optional<TokenizerVocab> tokenizer = target_tokenizer(options_.target_model);
  const train::MaskToken mask = train::choose_mask_token(tokenizer ? &*tokenizer : nullptr,
                                                         target.vocab_size, c.mask_token_id);
  o.model.mask_token_id = mask.id;
  log_line(fmt::format("mask token {}{}: {}", mask.id, mask.text.empty() ? "" : " " + mask.text,
                       mask.how));
  if (!mask.warning.empty()) log_line("warning: " + mask.warning);
  train::check_dflash_config(o.model);
  o.optimizer = options_.optimizer;
  o.seed = options_.seed;
  o.threads = options_.threads;
  o.anchors = c.anchors;
  o.labels = train::parse_dflash_labels(c.labels);
  TargetHead head = load_target_head(options_.target_model, options_.model_seed);
  o.embed = std::move(head.embed);
  o.lm_head = std::move(head.lm_head);
  return o;
}

void TrainingLoop::join_group() {
  const uint32_t local_members = ring_.shape().num_drafters;
  const uint32_t members = local_members * options_.nnodes;
  if (members < 2) return;
  // Exchanges are numbered from the loaded step + 1 and counted apart from the optimizer
  // (a skipped update does not advance its step): equal on members that loaded the same
  // checkpoint, which is what the exchange compares.
  exchange_step_ = trainer().optimizer_step() + 1;
  // A group that cannot form throws Error(kGroup) or Error(kCuda): exit 4.
  exchange_ = backend_->join_group(
      GroupJoin{ring_, members, rank_, local_members, options_.node_rank * local_members,
                session_.identity().epoch, exchange_step_, options_.rendezvous_dir, peer_watch(),
                keep_waiting()});
  log_line(fmt::format("drafter {} of a group of {}: {} from step {}", rank_, members,
                       exchange_->describe(), exchange_step_));
}

PeerWatch TrainingLoop::peer_watch() const {
  return [this](uint32_t member) {
    const uint32_t index = ring_.shape().num_targets + member;
    const uint32_t epoch = ring_.process(index).epoch.load(std::memory_order_acquire);
    return PeerStatus{epoch, owner_alive(ring_, index, epoch)};
  };
}

std::function<bool()> TrainingLoop::keep_waiting() {
  return [this] {
    session_.heartbeat();  // a long wait must not look like a hang
    return keep_running();
  };
}

std::string TrainingLoop::non_finite_problem(const train::LossStats& loss) const {
  if (std::isfinite(loss.loss)) return "";
  // Which, when the backend can tell (the CPU keeps the batch in process memory).
  const std::string features = backend_->features_problem();
  const char* value = std::isnan(loss.loss) ? "NaN" : loss.loss > 0 ? "+Inf" : "-Inf";
  return fmt::format(
      "the loss is {} at step {} on batch {}{}: training cannot go on; the run stops (a "
      "diverged model: lower --lr; non-finite hidden states: check the target model and its "
      "data)",
      value, backend_->trainer().optimizer_step() + 1, batch_id_,
      features.empty() ? "" : " (its hidden states are not finite: " + features + ")");
}

ExchangeResult TrainingLoop::step(const train::LossStats& loss, uint64_t start,
                                  train::StepStats& stats) {
  if (exchange_) {
    const ExchangeResult result = exchange_->all_reduce(exchange_step_, loss.counted);
    if (result != ExchangeResult::kReduced) return result;
    ++exchange_step_;
  }
  const train::UpdateStats update = trainer().apply_gradients();
  // In a group the loss and agreement are this member's batch's.
  stats = train::DrafterTrainer::step_stats(loss, update, double(monotonic_ns() - start) * 1e-9);
  return ExchangeResult::kReduced;
}

bool TrainingLoop::keep_running() const { return drafter_keeps_running(ring_); }

TrainingPosition TrainingLoop::position() {
  TrainingPosition p;
  // A resumed run continues from the first batch not consumed (the ledger marks each
  // consumed batch, and this drafter steps on a batch before it checkpoints), rounded down
  // to a multiple of the targets: a few batches may be trained twice. In a group, another
  // member may already hold its next batch (consumed, not yet stepped on) when drafter 0
  // checkpoints: up to one batch per other member is then skipped by a resumed run.
  const RingShape& s = ring_.shape();
  while (true) {
    const LedgerEntry* e = ring_.ledger_entry(trained_watermark_);
    if (e == nullptr || e->consume_word.load(std::memory_order_acquire) == 0) break;
    ++trained_watermark_;
  }
  p.next_data_batch = s.data_offset + trained_watermark_ - trained_watermark_ % s.num_targets;
  p.batches_trained = batches_before_ + batches_;
  return p;
}

void TrainingLoop::write_checkpoint() {
  if (!writer_) return;
  const uint64_t step = trainer().optimizer_step();
  const std::string path = writer_->write(save_training(trainer(), position()));
  last_checkpoint_step_ = step;
  ring_.header().training.checkpoint_step.store(step, std::memory_order_relaxed);
  log_line("checkpoint " + path);
}

void TrainingLoop::publish(const train::StepStats& stats) {
  TrainingProgress& p = ring_.header().training;
  // Every member counts its tokens; the curve is drafter 0's (its own batches' loss).
  p.tokens.fetch_add(stats.counted, std::memory_order_relaxed);
  if (loss_ema_ < 0) {
    loss_ema_ = stats.loss;
    agreement_ema_ = stats.agreement;
    acceptance_ema_ = stats.acceptance_length;
    if (reports_progress() && p.first_loss.load(std::memory_order_relaxed) == 0)
      p.first_loss.store(bits(stats.loss), std::memory_order_relaxed);
  }
  loss_ema_ += kEmaWeight * (stats.loss - loss_ema_);
  agreement_ema_ += kEmaWeight * (stats.agreement - agreement_ema_);
  acceptance_ema_ += kEmaWeight * (stats.acceptance_length - acceptance_ema_);
  if (!reports_progress()) return;
  p.steps.store(stats.step, std::memory_order_relaxed);
  p.last_loss.store(bits(stats.loss), std::memory_order_relaxed);
  p.loss_ema.store(bits(loss_ema_), std::memory_order_relaxed);
  p.agreement_ema.store(bits(agreement_ema_), std::memory_order_relaxed);
  p.acceptance_ema.store(bits(acceptance_ema_), std::memory_order_relaxed);
  p.step_us.store(uint32_t(stats.step_ms * 1000), std::memory_order_relaxed);
  p.lr.store(bits(stats.lr), std::memory_order_relaxed);
}

TrainingLoop::BatchCopy TrainingLoop::copy_out(BatchConsumer& consumer, const ClaimedBatch& batch) {
  batch_id_ = batch.view.batch_id();
  std::string problem;
  {
    StageTimer timer(session_.entry(), Stage::kDrafterVerify);
    problem = check_model_metadata(ring_, batch.claim.index);
    if (problem.empty()) backend_->copy_batch(batch.view);
  }
  if (problem.empty()) return BatchCopy::kCopied;
  consumer.mark_torn(batch, problem);
  return BatchCopy::kTorn;
}

void TrainingLoop::record_curves(const train::StepStats& stats) {
  // A skipped update did not advance the step: its record would repeat the previous one's.
  if (!curves_ || stats.skipped) return;
  curves::StepRecord r;
  r.step = stats.step;
  r.wall_time = double(std::chrono::duration_cast<std::chrono::microseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count()) *
                1e-6;
  r.loss = stats.loss;
  r.acceptance_length = stats.acceptance_length;
  r.agreement = stats.agreement;
  r.lr = stats.lr;
  r.grad_norm = stats.grad_norm;
  r.step_ms = stats.step_ms;
  // Every member's tokens (each adds its own to the ring's count as it publishes).
  const uint64_t tokens = ring_.header().training.tokens.load(std::memory_order_relaxed);
  const uint64_t now = monotonic_ns();
  r.tokens_per_s = now > curve_time_ns_ ? double(tokens - std::min(tokens, curve_tokens_)) /
                                              (double(now - curve_time_ns_) * 1e-9)
                                        : 0;
  curve_tokens_ = tokens;
  curve_time_ns_ = now;
  const BusyFractions::Reading busy = busy_->next();
  r.target_busy = busy.target;
  r.drafter_busy = busy.drafter;
  if (stats.accepted_at.size() > 1 && stats.accepted_at[0] > 0)
    for (size_t j = 1; j < stats.accepted_at.size(); ++j)
      r.position_acceptance.push_back(double(stats.accepted_at[j]) / double(stats.accepted_at[0]));
  if (held_out_ && stats.step % options_.eval_every == 0)
    if (const std::optional<HeldOutStats> h = held_out_->evaluate(trainer()))
      r.held_out = curves::HeldOutRecord{h->loss, h->acceptance_length, h->agreement};
  curves_->record(r);
}

void TrainingLoop::build_held_out_set() {
  if (options_.eval_every == 0 || options_.eval_data.empty() || !curves_) return;
  // Before the target is loaded for the batches: a large one takes minutes on the CPU.
  if (!trainer().evaluates_held_out()) {
    log_line("warning: no held-out curves: this trainer (" + backend_->describe() +
             ") cannot evaluate without a step; the CPU drafters can");
    return;
  }
  const RingShape& s = ring_.shape();
  HeldOutSetOptions o;
  o.target_model = options_.target_model;
  o.model_seed = options_.model_seed;
  o.data_dir = options_.eval_data;
  o.held_out_only = options_.eval_data_held_out;
  o.layer_ids.assign(s.layer_ids, s.layer_ids + s.num_layers);
  o.dtype = s.dtype;
  o.max_tokens = s.max_tokens;
  o.threads = options_.threads;
  // A failure costs the held-out curves, never the run.
  try {
    held_out_ = HeldOutSet::build(o);
  } catch (const std::exception& e) {
    log_line(std::string("warning: no held-out curves: ") + e.what());
    return;
  }
  log_line(fmt::format("held-out curves: {} batch(es), {} tokens of {}, evaluated every {} steps",
                       held_out_->batches(), held_out_->tokens(), options_.eval_data,
                       options_.eval_every));
}

int TrainingLoop::run() {
  session_.set_state(ProcessState::kRunning);
  if (leader() && !options_.run_dir.empty()) {
    // After the resume: the curves continue from the loaded checkpoint's step.
    curves_ = curves::TrainingCurves::open(options_.run_dir, trainer().optimizer_step());
    if (curves_->dropped() > 0)
      log_line(
          fmt::format("training curves: dropped {} step(s) past {} that an earlier start "
                      "trained; they are trained again",
                      curves_->dropped(), trainer().optimizer_step()));
    busy_.emplace(ring_);
    build_held_out_set();
    curve_tokens_ = ring_.header().training.tokens.load(std::memory_order_relaxed);
    curve_time_ns_ = monotonic_ns();
  }
  ProcessEntry& entry = session_.entry();
  BatchConsumer consumer(session_, options_.seed);
  consumer.set_copy_poller(backend_->copy_poller());
  ClaimedBatch batch;
  bool group_stopped = false;  // by another machine's run
  while (keep_running()) {
    session_.heartbeat();
    if (consumer.claim(kClaimSlice, batch) != SlotStatus::kOk) continue;
    const BatchCopy copy = copy_out(consumer, batch);
    // Copied out: the slot goes back to the targets before the step.
    if (consumer.release(batch).lost()) return kExitLostSlot;
    // A torn batch counts as consumed, with no tokens: it is not trained on.
    consumer.account(copy == BatchCopy::kCopied ? backend_->batch_tokens() : 0);
    if (copy == BatchCopy::kTorn) continue;
    train::StepStats stats;
    {
      // In a group the step's stage includes waiting for the peers' gradients.
      StageTimer step_timer(entry, Stage::kDrafterStep);
      const uint64_t start = monotonic_ns();
      const train::LossStats loss = backend_->compute_gradients();
      // Before the exchange: a NaN must not reach the peers' gradients, nor the run go on
      // training (every later step would be skipped) or crash-loop.
      if (std::string why = non_finite_problem(loss); !why.empty()) {
        log_line("error: " + why);
        return kExitNonFinite;
      }
      if (const ExchangeResult r = step(loss, start, stats); r == ExchangeResult::kStopped) {
        break;  // draining: the peers may have stopped before this step
      } else if (r == ExchangeResult::kFailed) {
        // Not a peer's death: counted as this drafter's crash, so a failure that repeats
        // stops the run as a crash loop instead of restarting the group forever.
        log_line(fmt::format("error: the gradient all-reduce failed at step {}: {}", exchange_step_,
                             exchange_->restart_reason()));
        return kExitInternal;
      } else if (r == ExchangeResult::kGroupStopped) {
        log_line(
            fmt::format("the drafter group stopped at step {}: another machine's run ended; "
                        "stopping this machine's run too",
                        exchange_step_));
        group_stopped = true;
        break;
      } else if (r == ExchangeResult::kGroupRestart) {
        log_line(
            fmt::format("leaving the drafter group at step {}: {}; the group restarts from the "
                        "newest checkpoint",
                        exchange_step_, exchange_->restart_reason()));
        return kExitGroupRestart;
      }
    }
    // A group step trains on one batch per member.
    batches_ += exchange_ ? exchange_->members() : 1;
    if (stats.skipped)
      log_line(fmt::format("step {} skipped: the gradient was not finite", stats.step));
    publish(stats);
    record_curves(stats);
    if (options_.checkpoint_every > 0 && stats.step % options_.checkpoint_every == 0 &&
        stats.step != last_checkpoint_step_) {
      write_checkpoint();
      if (curves_) curves_->write_plot();  // a look at a run still going
    }
  }
  session_.set_state(ProcessState::kDraining);
  if (exchange_) exchange_->stop();  // the members on other machines stop with this one
  finish();
  return group_stopped ? kExitGroupStopped : kExitOk;
}

void TrainingLoop::finish() {
  const uint64_t step = trainer().optimizer_step();
  if (step != last_checkpoint_step_) write_checkpoint();
  if (curves_) curves_->write_plot();
  if (!options_.export_path.empty() && leader() &&
      options_.objective == DrafterObjective::kDflash) {
    const train::DflashConfig& dflash = *trainer().dflash_config();
    const RingShape& s = ring_.shape();
    checkpoint::DflashExportOptions export_options;
    export_options.num_target_layers = model_outline_of(options_.target_model).num_layers;
    // The text that names the trained id in the target's tokenizer, for the engines that
    // resolve the mask token by its text (none when the target has no tokenizer).
    if (const auto tokenizer = target_tokenizer(options_.target_model)) {
      if (auto text = train::mask_token_text(*tokenizer, dflash.mask_token_id))
        export_options.mask_token = *text;
      else
        log_line(
            fmt::format("warning: mask token {} has no text in {} (a run resumed from a "
                        "checkpoint of another mask token?): the export names its id only, "
                        "which older SGLang versions do not read",
                        dflash.mask_token_id, tokenizer->source.string()));
    }
    export_options.origin = checkpoint::DflashOrigin{ring_.run_identity(), step};
    const train::TrainerState state = trainer().state();
    checkpoint::write_dflash_export(options_.export_path, dflash,
                                    std::span<const int32_t>(s.layer_ids, s.num_layers),
                                    trainer().layout(), state.params, export_options);
    log_line("exported the DFlash drafter to " + options_.export_path);
  } else if (!options_.export_path.empty() && leader()) {
    checkpoint::ExportOptions export_options;
    export_options.metadata["format"] = "pt";
    export_options.metadata["hsring.drafter"] = trainer().describe();
    export_options.metadata["hsring.step"] = std::to_string(step);
    export_options.metadata["hsring.run"] = ring_.run_identity();
    const std::vector<checkpoint::Tensor> weights = drafter_weights(trainer());
    checkpoint::export_safetensors(options_.export_path, weights, export_options);
    log_line("exported the drafter's weights to " + options_.export_path);
  }
  log_line(fmt::format(
      "trained {} batch(es) to step {}; loss {:f}, {} {:f}", batches_, step, loss_ema_,
      options_.objective == DrafterObjective::kDflash ? "acceptance length" : "agreement",
      options_.objective == DrafterObjective::kDflash ? acceptance_ema_ : agreement_ema_));
}

}  // namespace

const char* to_string(DrafterObjective objective) {
  return objective == DrafterObjective::kDflash ? "dflash" : "same-position";
}

DrafterObjective parse_drafter_objective(const std::string& text) {
  if (text == "dflash") return DrafterObjective::kDflash;
  if (text == "same-position") return DrafterObjective::kSamePosition;
  throw Error(Errc::kUsage, "--objective " + text +
                                ": expected dflash (block drafting, the default) or "
                                "same-position (the target's own next token; it does not draft)");
}

int run_training_drafter(WorkerSession& session, const TrainingDrafterOptions& options) {
  TrainingLoop loop(session, options);
  // A bad model or a damaged or locked checkpoint directory (never a silent start from
  // zero) is a usage error by its class: exit_code_of gives kExitUsage.
  if (auto code = run_worker_setup([&] { loop.set_up(); })) return *code;
  return loop.run();
}

}  // namespace hsring
