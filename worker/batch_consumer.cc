#include "worker/batch_consumer.h"

#include <fmt/format.h>

#include <thread>

#include "common/clock.h"
#include "common/log.h"
#include "shm/consumer.h"
#include "shm/ledger.h"
#include "shm/ordered_claims.h"
#include "shm/recovery.h"
#include "shm/stage_timer.h"

namespace hsring {

BatchConsumer::BatchConsumer(WorkerSession& session, uint64_t seed)
    : session_(session), ring_(session.ring()) {
  const Identity self = session.identity();
  rng_ = seed ^ (uint64_t(self.index) << 32) ^ self.epoch;
}

namespace {
// Early-published copies: polled back to back (yielding the core between polls) for as
// long as a whole batch's D2H can take, since a drafter that claims a slot whose copy is
// still running was waiting for it and should start the moment it ends; past that, every
// kCopyPollSleep. The producer's liveness (a lock probe, a system call) every
// kLivenessEvery polls.
constexpr uint64_t kCopyTightPollNs = 20'000'000;  // 0.84 GB at PCIe Gen5's ~55 GB/s: 15 ms
constexpr auto kCopyPollSleep = std::chrono::microseconds(20);
constexpr int kLivenessEvery = 64;
// Ordered claims past the batch limit: how long one claim attempt idles.
constexpr auto kClaimIdle = std::chrono::milliseconds(20);
}  // namespace

SlotStatus BatchConsumer::claim(std::chrono::nanoseconds timeout, ClaimedBatch& batch) {
  if (ring_.header().run_state.load(std::memory_order_acquire) != uint32_t(RunState::kRunning))
    return SlotStatus::kStopping;
  StageTimer wait_timer(session_.entry(), Stage::kDrafterClaimWait);
  // The timer's own start: the common claim (no pending copy) reads no clock of its own.
  const uint64_t deadline_ns = wait_timer.start_ns() + uint64_t(timeout.count());
  for (auto left = timeout;;) {
    ClaimResult claim = claim_slot(left);
    if (!claim) return claim.status();
    SlotClaim held = *claim;
    const SlotStatus copy = await_copy(held, deadline_ns);
    if (copy == SlotStatus::kLost) {  // given back unread: claim another
      const uint64_t now = monotonic_ns();
      left = std::chrono::nanoseconds(deadline_ns > now ? deadline_ns - now : 0);
      continue;
    }
    if (copy != SlotStatus::kOk) return copy;
    wait_timer.stop();
    batch.claim = held;
    batch.view = SlotView(ring_, held.index);
    // Only a batch held counts: one given back unread is still this drafter's to take.
    if (ring_.shape().ordered_claims) {
      const uint64_t drafters = ring_.shape().num_drafters;
      next_in_order_ = next_unconsumed(ring_, batch.view.batch_id() + drafters, drafters);
    }
    return SlotStatus::kOk;
  }
}

ClaimResult BatchConsumer::claim_slot(std::chrono::nanoseconds timeout) {
  const Identity self = session_.identity();
  const RingShape& shape = ring_.shape();
  if (!shape.ordered_claims)
    return claim_ready_slot(ring_, self, shape.hs_min_ready, timeout, rng_);
  const uint64_t drafters = shape.num_drafters;
  const uint64_t rank = self.index - shape.num_targets;
  // A restarted drafter resumes its sequence after what its predecessors consumed.
  if (next_in_order_ == UINT64_MAX) next_in_order_ = next_unconsumed(ring_, rank, drafters);
  // Past the batch limit no batch of ours will come: wait for the run to stop.
  if (next_in_order_ >= shape.batch_limit) {
    if (ring_.header().run_state.load(std::memory_order_acquire) == uint32_t(RunState::kStopped))
      return ClaimResult::stopping();
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(timeout, kClaimIdle));
    return ClaimResult::timed_out();
  }
  return claim_batch_in_order(ring_, self, next_in_order_, timeout);
}

SlotStatus BatchConsumer::await_copy(SlotClaim& claim, uint64_t deadline_ns) {
  PendingCopy pending;
  if (!read_pending_copy(ring_, claim, pending)) return SlotStatus::kOk;
  const uint64_t tight_until = monotonic_ns() + kCopyTightPollNs;
  for (int poll = 0;; ++poll) {
    if (copy_settled(ring_, claim, pending)) return SlotStatus::kOk;
    // An event that completed says the DMA is done; it is trusted only from a producer
    // still alive after the poll (a dead exporter's event is abandoned: invariant 6).
    const bool event_done = copy_poller_ && copy_poller_(pending);
    const bool check_owner = event_done || poll % kLivenessEvery == kLivenessEvery - 1;
    if (check_owner) {
      const bool alive = owner_alive(ring_, pending.producer, pending.producer_epoch);
      if (event_done && alive) return SlotStatus::kOk;
      // A producer that settles and then exits is not one that died mid-copy.
      if (!alive && copy_settled(ring_, claim, pending)) return SlotStatus::kOk;
      if (!alive) {
        const uint64_t batch_id = ring_.slot(claim.index).batch_id.load(std::memory_order_relaxed);
        if (give_back_unwritten(ring_, claim, pending).ok()) {
          ++given_back_;
          log_line(
              fmt::format("gave batch {} in slot {} back unread: target {} died before its "
                          "copy completed",
                          batch_id, claim.index, pending.producer));
        }
        return SlotStatus::kLost;
      }
    }
    if (poll == 0) ++copies_awaited_;  // neither settled nor polled complete at once
    const uint64_t now = monotonic_ns();
    if (now >= deadline_ns) {
      (void)hsring::return_unread(ring_, claim);
      return SlotStatus::kTimedOut;
    }
    if (now < tight_until)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(kCopyPollSleep);
  }
}

void BatchConsumer::mark_torn(const ClaimedBatch& batch, const std::string& problem) {
  count_torn(batch.view.batch_id(), fmt::format(" in slot {}", batch.claim.index), problem);
}

void BatchConsumer::mark_torn(uint64_t batch_id, const std::string& problem) {
  count_torn(batch_id, "", problem);
}

void BatchConsumer::count_torn(uint64_t batch_id, const std::string& where,
                               const std::string& problem) {
  ledger_mark_torn(ring_, batch_id);
  session_.entry().torn.fetch_add(1, std::memory_order_relaxed);  // relaxed: a statistic
  if (torn_++ < kTornLogLimit)
    log_line(fmt::format("TORN batch {}{}: {}", batch_id, where, problem));
}

SlotResult BatchConsumer::release(ClaimedBatch& batch) {
  const SlotResult result = release_consumed(ring_, batch.claim);
  if (result.lost())
    log_line(
        fmt::format("lost ownership of slot {}: this drafter was presumed dead and the slot "
                    "recovered; exiting",
                    batch.claim.index));
  return result;
}

SlotResult BatchConsumer::return_unread(ClaimedBatch& batch) {
  next_in_order_ = UINT64_MAX;  // ordered claims: the batch is ours to take again
  return hsring::return_unread(ring_, batch.claim);
}

uint64_t BatchConsumer::account(uint32_t tokens) {
  const RingShape& s = ring_.shape();
  ProcessEntry& entry = session_.entry();
  // Relaxed: statistics for status and summaries, with no ordering duties.
  const uint64_t before = entry.batches.fetch_add(1, std::memory_order_relaxed);
  entry.tokens.fetch_add(tokens, std::memory_order_relaxed);
  entry.hs_bytes.fetch_add(uint64_t(tokens) * s.hidden_size * s.num_layers * dtype_size(s.dtype),
                           std::memory_order_relaxed);
  return before;
}

}  // namespace hsring
