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
#include <string>

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

  // Claims a READY slot once hs_min_ready are (any one while the ring drains), waiting up
  // to `timeout`; the attempt is timed into Stage::kDrafterClaimWait. kOk with `batch` set;
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

  WorkerSession& session_;
  Ring& ring_;
  uint64_t rng_;
  uint64_t torn_ = 0;
};

}  // namespace hsring
