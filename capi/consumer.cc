#include "capi/consumer.h"

#include <fmt/format.h>

#include <algorithm>

#include "capi/capi_error.h"
#include "capi/user_session.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/signals.h"
#include "shm/slot_view.h"
#include "shm/stage_timer.h"
#if HSRING_CAPI_CUDA
#include "drafter_proc/slot_dma.h"
#include "gpu/host_registration.h"
#include "gpu/kernels.h"
#endif

namespace hsring::capi {

namespace {
constexpr auto kClaimSlice = std::chrono::milliseconds(100);
}  // namespace

std::unique_ptr<Consumer> Consumer::open(const std::string& ring, uint32_t index,
                                         const hs_consumer_options& options) {
  auto session =
      start_user_session(ring, Role::kDrafter, index, options.lock_wait_ms, options.expected_epoch);
  return std::unique_ptr<Consumer>(new Consumer(std::move(session), options));
}

Consumer::Consumer(std::unique_ptr<WorkerSession> session, const hs_consumer_options& options)
    : session_(std::move(session)),
      ring_(session_->ring()),
      launcher_(ring_),
      consumer_(*session_, options.seed) {
  if (session_->recovered_at_start().total() > 0)
    log_line(fmt::format("returned {} slot(s) of the previous epoch",
                         session_->recovered_at_start().total()));
  session_->set_state(ProcessState::kRunning);
}

Consumer::~Consumer() {
  for (Held& h : held_) (void)consumer_.return_unread(h.batch);  // lost ones were recovered
  session_->set_state(ProcessState::kDraining);
}

bool Consumer::keep_running() {
  if (launcher_.gone()) {
    log_line("the launcher is gone; stopping");
    request_stop();
  }
  return !stop_requested() &&
         ring_.header().run_state.load(std::memory_order_acquire) == uint32_t(RunState::kRunning);
}

Consumer::Held& Consumer::held(uint64_t ticket) {
  auto it = std::find_if(held_.begin(), held_.end(),
                         [&](const Held& h) { return h.batch.claim.word.word() == ticket; });
  if (it == held_.end())
    throw Error(Errc::kApiState,
                fmt::format("no batch with ticket {} is held: it was released already, or never "
                            "claimed",
                            ticket));
  return *it;
}

hs_status Consumer::next(uint32_t timeout_ms, hs_batch& out) {
  const uint64_t deadline = monotonic_ns() + uint64_t(timeout_ms) * 1'000'000;
  while (true) {
    session_->heartbeat();
    if (!keep_running()) return HS_STOPPED;
    const uint64_t now = monotonic_ns();
    // At least one attempt, then slices of the wait (a stop is noticed between them).
    const auto slice = std::min<std::chrono::nanoseconds>(
        kClaimSlice, std::chrono::nanoseconds(deadline > now ? deadline - now : 1));
    ClaimedBatch batch;
    const SlotStatus status = consumer_.claim(slice, batch);
    if (status == SlotStatus::kStopping) return HS_STOPPED;
    if (status != SlotStatus::kOk) {
      if (monotonic_ns() >= deadline) return HS_TIMEOUT;
      continue;
    }
    const SlotView& view = batch.view;
    if (!view.in_bounds()) {
      // Counted like the built-in drafter counts a torn batch, and freed: no pointer is
      // handed out over bounds the ring's shape does not vouch for.
      consumer_.mark_torn(batch, view.bounds_problem());
      if (consumer_.release(batch).lost())
        return fail(HS_ERR_LOST_SLOT, fmt::format("lost ownership of slot {}", view.slot()));
      continue;
    }
    out = hs_batch{};
    out.ticket = batch.claim.word.word();
    out.batch_id = view.batch_id();
    out.slot = view.slot();
    out.token_count = view.token_count();
    out.num_docs = view.num_docs();
    out.length_bucket = view.length_bucket();
    out.tokens = view.tokens().data();
    out.positions = view.positions().data();
    out.doc_offsets = view.doc_offsets().data();
    out.labels = view.labels().data();
    for (uint32_t k = 0; k < view.layers(); ++k) out.layers[k] = view.layer(k).first;
    out.layer_row_pitch = view.layer(0).pitch;
    held_.push_back(Held{batch, monotonic_ns()});
    return HS_OK;
  }
}

hs_status Consumer::release(uint64_t ticket) {
  Held& h = held(ticket);
  const Held done = h;
  held_.erase(held_.begin() + (&h - held_.data()));
  ProcessEntry& entry = session_->entry();
  // A user drafter's work on a batch is what it does between claim and release.
  record_stage(entry, Stage::kDrafterStep, monotonic_ns() - done.claimed_ns);
  ClaimedBatch batch = done.batch;
  if (consumer_.release(batch).lost())
    return fail(HS_ERR_LOST_SLOT,
                fmt::format("lost ownership of slot {} (this drafter was presumed dead); exit and "
                            "restart",
                            batch.claim.index));
  consumer_.account(batch.view.token_count());
  session_->heartbeat();
  return HS_OK;
}

void Consumer::copy_to_device(uint64_t ticket, void* device, uint64_t device_bytes, void* stream,
                              float noise_std, uint64_t seed, uint64_t step) {
#if HSRING_CAPI_CUDA
  const Held& h = held(ticket);
  const RingShape& s = ring_.shape();
  const SlotView& batch = h.batch.view;
  const uint32_t tokens = batch.rows();
  const uint64_t elements = uint64_t(tokens) * s.num_layers * s.hidden_size;
  if (device_bytes < elements * dtype_size(s.dtype))
    throw Error(Errc::kApiShape,
                fmt::format("the device buffer holds {} bytes; [{}, {}] needs {}", device_bytes,
                            tokens, s.num_layers * s.hidden_size, elements * dtype_size(s.dtype)));
  if (!pinned_) pinned_ = gpu::pin_ring_payload(ring_);
  auto cuda_stream = static_cast<cudaStream_t>(stream);
  StageTimer timer(session_->entry(), Stage::kDrafterH2D);
  auto check = [](const gpu::CudaStatus& status) {
    if (!status.ok()) throw Error(Errc::kCuda, status.message());
  };
  check(enqueue_slot_features(batch, static_cast<std::byte*>(device), cuda_stream));
  if (noise_std > 0) {
    const cudaError_t e =
        gpu::launch_add_noise(device, elements, s.dtype, noise_std, seed, step, cuda_stream);
    if (e != cudaSuccess) throw Error(Errc::kCuda, std::string("noise: ") + cudaGetErrorString(e));
  }
  // The slot may be released once this returns: the copy must have landed.
  if (const cudaError_t e = cudaStreamSynchronize(cuda_stream); e != cudaSuccess)
    throw Error(Errc::kCuda, std::string("cudaStreamSynchronize: ") + cudaGetErrorString(e));
#else
  (void)ticket, (void)device, (void)device_bytes, (void)stream, (void)noise_std, (void)seed,
      (void)step;
  throw Error(Errc::kApiUnsupported,
              "this libhsring was built without CUDA: read the batch's host views instead");
#endif
}

}  // namespace hsring::capi
