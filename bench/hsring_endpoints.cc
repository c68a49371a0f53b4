#include "bench/hsring_endpoints.h"

#include <chrono>
#include <optional>
#include <stdexcept>

#include "bench/bench_process.h"
#include "common/clock.h"
#include "shm/consumer.h"
#include "shm/producer.h"

namespace hsring::bench {

namespace {

using std::chrono::nanoseconds;

// A run that waits this long for one slot is broken, not slow.
constexpr nanoseconds kStallLimit = std::chrono::seconds(30);
// The blocking mode's slice; the workers use a similar one to notice stop requests.
constexpr nanoseconds kBlockingSlice = std::chrono::milliseconds(100);
constexpr auto kLockWait = std::chrono::milliseconds(1000);

nanoseconds claim_timeout(WaitMode mode) {
  return mode == WaitMode::kBlocking ? kBlockingSlice : nanoseconds(0);
}

// Calls `attempt` until it returns a claim; throws after kStallLimit.
template <class Attempt>
SlotClaim claim_or_throw(Attempt attempt, WaitMode mode, const char* waiting_for) {
  // The first attempt usually succeeds: read no clock for it, so that the harness adds
  // nothing to the protocol's own cost per message.
  if (ClaimResult claim = attempt()) return *claim;
  const uint64_t deadline = monotonic_ns() + uint64_t(kStallLimit.count());
  PollBackoff backoff;
  while (true) {
    const ClaimResult claim = attempt();
    if (claim) return *claim;
    if (claim.status() == SlotStatus::kStopping)
      throw std::runtime_error(std::string("the run stopped while waiting for a ") + waiting_for +
                               " slot");
    if (monotonic_ns() >= deadline) {
      throw std::runtime_error(std::string("no ") + waiting_for + " slot within " +
                               std::to_string(kStallLimit.count() / 1'000'000'000) + " s");
    }
    if (mode == WaitMode::kPolling) backoff.pause();
  }
}

std::unique_ptr<WorkerSession> start_session(const std::string& ring_name, bool target,
                                             uint32_t role_index) {
  auto ring = Ring::attach(ring_name);
  const uint32_t index = target ? role_index : ring->shape().num_targets + role_index;
  auto session = WorkerSession::start(std::move(ring), index,
                                      target ? Role::kTarget : Role::kDrafter, kLockWait);
  session->set_state(ProcessState::kRunning);
  return session;
}

}  // namespace

const char* to_string(WaitMode mode) {
  return mode == WaitMode::kBlocking ? "futex waits" : "polling";
}

HsringProducer::HsringProducer(const std::string& ring_name, uint32_t target, WaitMode mode)
    : session_(start_session(ring_name, true, target)), mode_(mode) {
  // Producers start their searches apart so they do not all race for the same slot.
  hint_ = target * ring().slot_count() / ring().shape().num_targets;
}

SlotClaim HsringProducer::begin(uint64_t batch_id) {
  Ring& r = ring();
  const Identity self = session_->identity();
  const nanoseconds timeout = claim_timeout(mode_);
  SlotClaim claim =
      claim_or_throw([&] { return claim_free_slot(r, self, hint_, timeout); }, mode_, "FREE");
  // Continue after the slot just taken: the slots behind it are the likeliest still busy.
  hint_ = claim.index + 1;
  if (bind_batch(r, claim, batch_id).lost()) {
    throw std::runtime_error("lost the claim of slot " + std::to_string(claim.index) +
                             " before binding batch " + std::to_string(batch_id));
  }
  return claim;
}

void HsringProducer::publish(SlotClaim& claim, uint64_t batch_id) {
  const BatchInfo info{.batch_id = batch_id, .token_count = 1, .num_docs = 1, .length_bucket = 0};
  if (hsring::publish(ring(), claim, info).lost()) {
    throw std::runtime_error("lost the claim of slot " + std::to_string(claim.index) +
                             " before publishing batch " + std::to_string(batch_id));
  }
}

HsringConsumer::HsringConsumer(const std::string& ring_name, uint32_t drafter, WaitMode mode)
    : session_(start_session(ring_name, false, drafter)),
      mode_(mode),
      rng_state_(0x5EED0000ull + drafter) {}

SlotClaim HsringConsumer::acquire() {
  Ring& r = ring();
  const Identity self = session_->identity();
  const uint32_t min_ready = r.shape().hs_min_ready;
  const nanoseconds timeout = claim_timeout(mode_);
  return claim_or_throw([&] { return claim_ready_slot(r, self, min_ready, timeout, rng_state_); },
                        mode_, "READY");
}

uint64_t HsringConsumer::batch_id(const SlotClaim& claim) const {
  // Relaxed: the acquire CAS that made this claim ordered the producer's bind before us.
  return ring().slot(claim.index).batch_id.load(std::memory_order_relaxed);
}

void HsringConsumer::release(SlotClaim& claim) {
  if (release_consumed(ring(), claim).lost()) {
    throw std::runtime_error("lost the claim of slot " + std::to_string(claim.index) +
                             " while reading it");
  }
}

}  // namespace hsring::bench
