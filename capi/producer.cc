#include "capi/producer.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <thread>

#include "capi/capi_error.h"
#include "capi/user_session.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/signals.h"
#include "shm/futex.h"
#include "shm/slot_view.h"
#include "shm/stage_timer.h"
#if HSRING_CAPI_CUDA
#include "capi/cuda_publisher.h"
#endif

namespace hsring::capi {

namespace {

constexpr auto kShardEndPoll = std::chrono::milliseconds(20);

[[noreturn]] void state_error(const std::string& message) { throw Error(Errc::kApiState, message); }
[[noreturn]] void shape_error(const std::string& message) { throw Error(Errc::kApiShape, message); }

}  // namespace

std::unique_ptr<Producer> Producer::open(const std::string& ring, uint32_t index,
                                         const hs_producer_options& options) {
  auto session =
      start_user_session(ring, Role::kTarget, index, options.lock_wait_ms, options.expected_epoch);
  return std::unique_ptr<Producer>(new Producer(std::move(session), options));
}

Producer::Producer(std::unique_ptr<WorkerSession> session, const hs_producer_options& options)
    : session_(std::move(session)), ring_(session_->ring()), launcher_(ring_) {
  TokenSourceOptions data;
  data.data_dir = options.data_dir ? options.data_dir : "";
  data.data_seed = options.data_seed;
  data.read_ahead = options.read_ahead ? options.read_ahead : 4;
  data.data_offset = ring_.shape().data_offset;
  data.nnodes = std::max(1u, options.nnodes);
  data.node_rank = options.node_rank;
  const TokenOrigin origin =
      options.tokens_from == HS_TOKENS_CALLER ? TokenOrigin::kCaller : TokenOrigin::kAuto;
  tokens_ = make_job_tokens(origin, ring_, session_->identity().index, data);
  producer_ = std::make_unique<BatchProducer>(*session_, *tokens_);
  // As hsring-target does at start: the previous epoch's bound batches come first.
  std::vector<BatchJob> adopted = producer_->adopt_unpublished();
  adopted_.assign(std::make_move_iterator(adopted.begin()), std::make_move_iterator(adopted.end()));
  next_seq_ = producer_->next_seq();
  session_->set_state(ProcessState::kRunning);
}

Producer::~Producer() {
  // Jobs the caller never published stay WRITING with their batch ids bound: the next
  // incarnation adopts them (a clean close at the end of a run leaves none).
#if HSRING_CAPI_CUDA
  publisher_.reset();  // publishes what was handed to it, then joins
#endif
  session_->set_state(ProcessState::kDraining);
}

bool Producer::keep_running() {
  if (launcher_.gone()) {
    log_line("the launcher is gone; stopping");
    request_stop();
  }
  return producer_->keep_running();
}

Producer::OpenJob& Producer::job(uint64_t ticket) {
  auto it = open_.find(ticket);
  if (it == open_.end())
    state_error(fmt::format(
        "no open job has ticket {}: it was published already, or never taken (call next_job first)",
        ticket));
  return it->second;
}

void Producer::fill_job(hs_job& out, const OpenJob& job) const {
  const uint32_t slot = job.claim.index;
  out.ticket = job.claim.word.word();
  out.batch_id = job.plan.batch_id;
  out.slot = slot;
  out.token_count = job.plan.token_count;
  out.num_docs = job.plan.num_docs;
  out.tokens = ring_.tokens(slot);
  out.positions = ring_.positions(slot);
  out.doc_offsets = ring_.doc_offsets(slot);
  out.labels = ring_.labels(slot);
  out.loss_mask = job.loss_mask.empty() ? nullptr : job.loss_mask.data();
}

hs_status Producer::at_shard_end(uint64_t deadline_ns) {
  // "Exhausted" promises every batch of the shard is published: only once nothing of
  // ours is open or still being copied.
  if (!open_.empty())
    state_error(fmt::format(
        "the shard's last batches are taken: publish the {} open job(s) before asking for another",
        open_.size()));
  if (hs_status s = flush(); s != HS_OK) return s;
  TargetProgress& progress = ring_.target_progress(session_->identity().index);
  // acq_rel: consumers read it with acquire to waive hs_min_ready.
  if (progress.exhausted.exchange(1, std::memory_order_acq_rel) == 0)
    SharedCondition(ring_.header().ready_futex, ring_.header().ready_waiters).notify_all();
  // Like hsring-target, stay attached until the run stops: an exit while the run goes on
  // is a crash to the launcher.
  while (keep_running()) {
    session_->heartbeat();
    if (monotonic_ns() >= deadline_ns) return HS_TIMEOUT;
    std::this_thread::sleep_for(kShardEndPoll);
  }
  return HS_STOPPED;
}

hs_status Producer::next_job(uint32_t timeout_ms, hs_job& out) {
  const uint64_t deadline = monotonic_ns() + uint64_t(timeout_ms) * 1'000'000;
  session_->heartbeat();
  if (!keep_running()) return HS_STOPPED;
  OpenJob job;
  const bool reproduced = !adopted_.empty();
  if (reproduced) {
    job.claim = *adopted_.front().bound;
    job.plan = adopted_.front().plan;
    adopted_.pop_front();
  } else {
    const uint64_t batch_id = producer_->shard().batch_id(next_seq_);
    const uint64_t limit = ring_.shape().batch_limit;
    if (limit != 0 && batch_id >= limit) return at_shard_end(deadline);
    switch (producer_->claim_and_bind(batch_id, job.claim, Stage::kTargetEnqueue, nullptr,
                                      std::max<uint64_t>(deadline, 1))) {
      case PipelineStatus::kOk:
        break;
      case PipelineStatus::kTimedOut:
        return HS_TIMEOUT;
      case PipelineStatus::kStopped:
        return HS_STOPPED;
      case PipelineStatus::kLostSlot:
        return fail(HS_ERR_LOST_SLOT,
                    fmt::format("lost ownership of a slot while binding batch {}; exit and restart",
                                batch_id));
      case PipelineStatus::kFailed:
        return fail(HS_ERR_INTERNAL, "claim failed");
    }
    job.plan = producer_->plan(batch_id);
    ++next_seq_;
  }
  // Re-produced or fresh, its tokens (and its loss mask) come from the batch id alone.
  job.loss_mask = tokens_->fill(job.plan, ring_, job.claim.index);
  job.tokens_set = tokens_->fills_tokens();
  job.labels_written = tokens_->fills_labels();
  job.taken_ns = monotonic_ns();
  const uint64_t ticket = job.claim.word.word();
  // In place first: out.loss_mask points into the stored job.
  const OpenJob& stored = open_.emplace(ticket, std::move(job)).first->second;
  fill_job(out, stored);
  out.reproduced = reproduced ? 1 : 0;
  return HS_OK;
}

void Producer::set_tokens(uint64_t ticket, const int32_t* tokens, const int32_t* positions,
                          uint32_t count, const int32_t* doc_offsets, uint32_t num_docs) {
  OpenJob& j = job(ticket);
  if (tokens_->fills_tokens())
    state_error(
        "this producer reads its tokens from the ring's data; open it with "
        "HS_TOKENS_CALLER to set them");
  const RingShape& s = ring_.shape();
  if (count < 1 || count > s.max_tokens)
    shape_error(fmt::format("{} tokens: a batch holds 1 to {} (the ring's max_tokens)", count,
                            s.max_tokens));
  if (num_docs < 1 || num_docs > count)
    shape_error(fmt::format("{} documents for {} tokens: give 1 to {}", num_docs, count, count));
  if (doc_offsets[0] != 0 || doc_offsets[num_docs] != int32_t(count))
    shape_error(fmt::format("doc_offsets must run from 0 to the token count {}", count));
  for (uint32_t d = 0; d < num_docs; ++d) {
    if (doc_offsets[d + 1] <= doc_offsets[d])
      shape_error(fmt::format("doc_offsets[{}] is not above doc_offsets[{}]", d + 1, d));
  }
  for (uint32_t t = 0; t < count; ++t) {
    if (s.content == PayloadContent::kModel &&
        (tokens[t] < 0 || uint32_t(tokens[t]) >= s.vocab_size))
      shape_error(fmt::format("tokens[{}] = {} is outside the vocabulary [0, {})", t, tokens[t],
                              s.vocab_size));
  }
  const uint32_t slot = j.claim.index;
  std::memcpy(ring_.tokens(slot), tokens, count * sizeof(int32_t));
  std::memcpy(ring_.positions(slot), positions, count * sizeof(int32_t));
  std::memcpy(ring_.doc_offsets(slot), doc_offsets, (num_docs + 1) * sizeof(int32_t));
  j.plan.token_count = count;
  j.plan.num_docs = num_docs;
  j.plan.length_bucket = 0;
  j.tokens_set = true;
}

std::vector<Producer::LayerTarget>& Producer::checked_layers(const OpenJob& j, uint32_t first,
                                                             uint32_t count,
                                                             const void* const* sources,
                                                             const uint64_t* row_pitches) {
  const RingShape& s = ring_.shape();
  if (count == 0 || first >= s.num_layers || count > s.num_layers - first) {
    const std::string which =
        count == 1 ? fmt::format("layer {}", first)
                   : fmt::format("layers {} to {}", first, uint64_t(first) + count - 1);
    throw Error(Errc::kUsage, fmt::format("{}: the ring captures {} layers", which, s.num_layers));
  }
  if (!j.tokens_set) state_error("set the job's tokens before writing its layers");
  layer_targets_.clear();  // keeps its capacity: no allocation after the first job
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t layer = first + i;
    if (sources[i] == nullptr)
      throw Error(Errc::kUsage, fmt::format("layer {}: source is NULL", layer));
    const LayerRows rows = layer_rows(ring_, j.claim.index, layer);
    const uint64_t pitch = row_pitches && row_pitches[i] ? row_pitches[i] : rows.row_bytes;
    if (pitch < rows.row_bytes)
      shape_error(fmt::format("layer {}: row pitch {} is below a row's {} bytes", layer, pitch,
                              rows.row_bytes));
    layer_targets_.push_back({rows, pitch});
  }
  return layer_targets_;
}

void Producer::write_layers(uint64_t ticket, uint32_t first, uint32_t count,
                            const void* const* hosts, const uint64_t* row_pitches) {
  OpenJob& j = job(ticket);
  const std::vector<LayerTarget>& targets = checked_layers(j, first, count, hosts, row_pitches);
  // One sample per call: the copy of what the call was given (all K layers from
  // write_layers, as the GPU target times its whole copy).
  StageTimer timer(session_->entry(), Stage::kTargetCopy);
  for (uint32_t i = 0; i < count; ++i) {
    const LayerTarget& t = targets[i];
    const auto* src = static_cast<const std::byte*>(hosts[i]);
    if (t.rows.pitch == t.rows.row_bytes && t.source_pitch == t.rows.row_bytes) {
      std::memcpy(t.rows.first, src, uint64_t(j.plan.token_count) * t.rows.row_bytes);
    } else {
      for (uint32_t r = 0; r < j.plan.token_count; ++r)
        std::memcpy(t.rows.first + r * t.rows.pitch, src + r * t.source_pitch, t.rows.row_bytes);
    }
    j.layers_written |= 1u << (first + i);
  }
}

void Producer::write_labels(uint64_t ticket, const int32_t* labels, uint32_t count) {
  OpenJob& j = job(ticket);
  const RingShape& s = ring_.shape();
  if (!j.tokens_set) state_error("set the job's tokens before writing its labels");
  if (count != j.plan.token_count)
    shape_error(fmt::format("{} labels for a batch of {} tokens", count, j.plan.token_count));
  for (uint32_t t = 0; t < count; ++t) {
    if (s.content == PayloadContent::kModel && labels[t] != kIgnoreLabel &&
        (labels[t] < 0 || uint32_t(labels[t]) >= s.vocab_size))
      shape_error(fmt::format(
          "labels[{}] = {} is outside the vocabulary [0, {}) and not -100 (not trained on)", t,
          labels[t], s.vocab_size));
  }
  int32_t* slot_labels = ring_.labels(j.claim.index);
  std::memcpy(slot_labels, labels, count * sizeof(int32_t));
  // As hsring-target masks its greedy labels (data::mask_target_labels): whatever the
  // caller's model predicted where the next token does not count is not trained on.
  if (!j.loss_mask.empty()) {
    for (uint32_t t = 0; t < count; ++t)
      if (j.loss_mask[t] == 0) slot_labels[t] = kIgnoreLabel;
  }
  j.labels_written = true;
}

hs_status Producer::publish(uint64_t ticket) {
  OpenJob& j = job(ticket);
  const RingShape& s = ring_.shape();
  if (!j.tokens_set) state_error("the job's tokens were never set");
  const uint32_t all = s.num_layers >= 32 ? ~0u : (1u << s.num_layers) - 1;
  if ((j.layers_written & all) != all) {
    const int missing = std::countr_one(j.layers_written);
    state_error(fmt::format("layer {} of batch {} was never written", missing, j.plan.batch_id));
  }
  if (!j.labels_written)
    state_error(
        fmt::format("the labels of batch {} were never written (write_labels)", j.plan.batch_id));
  // The caller's forward: from taking the job to publishing it.
  record_stage(session_->entry(), Stage::kTargetForward, monotonic_ns() - j.taken_ns);
  const OpenJob done = std::move(j);  // no copy of its mask on the critical path
  open_.erase(ticket);
  if (done.device_copies) {
#if HSRING_CAPI_CUDA
    return publisher_->submit(done.claim, done.plan, done.stream);
#endif
  }
  StageTimer timer(session_->entry(), Stage::kTargetPublishWait);
  SlotClaim claim = done.claim;
  if (producer_->publish_batch(claim, done.plan) != PipelineStatus::kOk)
    return fail(
        HS_ERR_LOST_SLOT,
        fmt::format("lost ownership of slot {} before publishing batch {}; exit and restart",
                    claim.index, done.plan.batch_id));
  return HS_OK;
}

hs_status Producer::flush() {
#if HSRING_CAPI_CUDA
  if (publisher_) return publisher_->flush();
#endif
  return HS_OK;
}

void Producer::copy_layers_device(uint64_t ticket, uint32_t first, uint32_t count,
                                  const void* const* devices, const uint64_t* row_pitches,
                                  void* stream) {
#if HSRING_CAPI_CUDA
  OpenJob& j = job(ticket);
  const std::vector<LayerTarget>& targets = checked_layers(j, first, count, devices, row_pitches);
  if (j.device_copies && j.stream != stream)
    state_error("every device copy of one job goes on one stream (its publish waits on it)");
  if (!publisher_) publisher_ = std::make_unique<CudaPublisher>(*producer_);
  for (uint32_t i = 0; i < count; ++i) {
    const LayerTarget& t = targets[i];
    publisher_->enqueue_copy(t.rows.first, t.rows.pitch, devices[i], t.source_pitch,
                             t.rows.row_bytes, j.plan.token_count, stream);
    // Per layer, so a failed enqueue leaves publish refusing the job (a layer missing).
    j.device_copies = true;
    j.stream = stream;
    j.layers_written |= 1u << (first + i);
  }
#else
  (void)ticket, (void)first, (void)count, (void)devices, (void)row_pitches, (void)stream;
  throw Error(Errc::kApiUnsupported,
              "this libhsring was built without CUDA: copy the layer "
              "to the host and call write_layer");
#endif
}

}  // namespace hsring::capi
