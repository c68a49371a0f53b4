// The consumer half of every drafter (hsring-drafter's verify and training loops, the GPU
// drafter, the C API's consumer): the counterpart of target_proc/batch_producer.h. It
// claims a random READY slot (READY -> READING), hands the batch out as a bounds-checked
// view (shm/slot_view.h), marks torn batches in the ledger and the process's counters,
// releases the slot as consumed (READING -> FREE) or unread, and counts what was consumed.
// A drafter keeps only what differs: how it checks a batch, and what it does with it.
//
// Thread safety: one thread at a time (each drafter's loop thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "shm/copy_ticket.h"
#include "shm/slot_claim.h"
#include "shm/slot_result.h"
#include "shm/slot_view.h"
#include "shm/worker_session.h"

namespace hsring {

// A batch held by the caller between BatchConsumer::claim and release.
struct ClaimedBatch {
  SlotClaim claim;
  SlotView view;  // the slot's header, read once at the claim
};

class BatchConsumer {
 public:
  // Torn batches logged (each one is counted); the rest only counted.
  static constexpr uint64_t kTornLogLimit = 10;

  // `seed` picks this process's sequence of random claims (mixed with its index and
  // epoch, so a restarted drafter does not repeat its predecessor's).
  BatchConsumer(WorkerSession& session, uint64_t seed);

  WorkerSession& session() const { return session_; }
  Ring& ring() const { return ring_; }

  // Polls an early-published slot's event (shm/copy_ticket.h): true once it has completed.
  // Only cudaEventQuery, never a wait (invariant 6); false for "not yet" and for an event
  // it cannot use, which leaves the wait to the producer's settled ticket.
  using CopyPoller = std::function<bool(const PendingCopy&)>;
  // Installed by a consumer on a GPU; without one, early-published slots are read once
  // their producer settles the ticket.
  void set_copy_poller(CopyPoller poller) { copy_poller_ = std::move(poller); }
  // Early-published slots given back unread (their producer died mid-copy).
  uint64_t given_back() const { return given_back_; }
  // Claims of early-published slots whose copy was still running at the claim.
  uint64_t copies_awaited() const { return copies_awaited_; }

  // Claims a READY slot once hs_min_ready are (any one while the ring drains), or under
  // ordered claims this drafter's next batch id (shm/ordered_claims.h), waiting up to
  // `timeout`, and, for an early-published slot, until its copy has completed: a slot
  // whose producer died first goes back to that target's next incarnation unread and
  // another is claimed. The attempt is timed into Stage::kDrafterClaimWait. kOk with `batch` set;
  // kTimedOut when none came; kStopping when the run no longer runs (no claim is tried
  // then: a drafter stops claiming when the ring drains) or has stopped during the wait.
  SlotStatus claim(std::chrono::nanoseconds timeout, ClaimedBatch& batch);

  // Counts a torn batch: the ledger's torn mark, the process's torn counter, and (for the
  // first kTornLogLimit) a log line naming the batch, its slot and `problem`.
  void mark_torn(const ClaimedBatch& batch, const std::string& problem);
  // The same for a batch already released (a GPU check that finishes after the release).
  void mark_torn(uint64_t batch_id, const std::string& problem);
  // Torn batches this consumer marked.
  uint64_t torn() const { return torn_; }

  // Marks the batch consumed and frees its slot: READING -> FREE. Nothing may be read from
  // the slot afterwards. kLost (logged) when the slot was taken from us: we were presumed
  // dead and it was recovered; the caller must exit.
  SlotResult release(ClaimedBatch& batch);
  // Puts the batch back unread: READING -> READY (a consumer that stops holding it).
  SlotResult return_unread(ClaimedBatch& batch);

  // Counts one consumed batch of `tokens` tokens (0 for one not trained on) into the
  // process's counters: batches, tokens, hidden-state bytes. Returns the number of batches
  // this process index had consumed before it (a step number).
  uint64_t account(uint32_t tokens);

 private:
  void count_torn(uint64_t batch_id, const std::string& where, const std::string& problem);
  // Waits for a claimed slot's pending copy: kOk once complete; kLost when it was given
  // back (or lost); kTimedOut when `deadline_ns` passed first (the slot goes back READY).
  SlotStatus await_copy(SlotClaim& claim, uint64_t deadline_ns);

  // One attempt of claim(): a random READY slot, or the next id of this drafter's sequence.
  ClaimResult claim_slot(std::chrono::nanoseconds timeout);

  WorkerSession& session_;
  Ring& ring_;
  uint64_t rng_;
  // Ordered claims: the next batch id this drafter takes (drafter r of N takes r, r + N,
  // ...); UINT64_MAX until the first claim finds where its sequence resumes.
  uint64_t next_in_order_ = UINT64_MAX;
  uint64_t torn_ = 0;
  uint64_t given_back_ = 0;
  uint64_t copies_awaited_ = 0;
  CopyPoller copy_poller_;
};

}  // namespace hsring
