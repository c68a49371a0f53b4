// One benchmark process's membership in an hsring ring, as a producer (target) or a
// consumer (drafter): its own attachment and WorkerSession, slot claims through the
// protocol's calls, and a loud failure instead of a silent stall.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "shm/ring.h"
#include "shm/slot_claim.h"
#include "shm/worker_session.h"

namespace hsring::bench {

// How a side waits for a slot. kBlocking passes a timeout to the claim calls, which then
// sleep on the ring's futex condition as the workers do; kPolling passes a zero timeout
// and retries, never sleeping: the lowest latency the protocol allows, at a core's cost.
enum class WaitMode { kBlocking, kPolling };
const char* to_string(WaitMode mode);

// A target process of the ring. Call only in the process that will use it (after fork):
// the session holds this process's liveness lock.
class HsringProducer {
 public:
  // Attaches `ring_name` and starts the session of target `target`. Throws Error.
  HsringProducer(const std::string& ring_name, uint32_t target, WaitMode mode);

  Ring& ring() const { return session_->ring(); }
  // Claims a FREE slot and binds `batch_id` to it (FREE -> CLAIMED -> WRITING).
  // Throws std::runtime_error when no slot frees up in time or the claim is lost.
  SlotClaim begin(uint64_t batch_id);
  // WRITING -> READY. REQUIRES: the payload of `claim` is written.
  void publish(SlotClaim& claim, uint64_t batch_id);

 private:
  std::unique_ptr<WorkerSession> session_;
  WaitMode mode_;
  uint32_t hint_;  // where the next search for a FREE slot starts
};

// A drafter process of the ring; same rules as HsringProducer.
class HsringConsumer {
 public:
  // Attaches `ring_name` and starts the session of drafter `drafter`. Throws Error.
  HsringConsumer(const std::string& ring_name, uint32_t drafter, WaitMode mode);

  Ring& ring() const { return session_->ring(); }
  // READY -> READING, with hs_min_ready as the ring says. Throws std::runtime_error when
  // nothing becomes READY in time.
  SlotClaim acquire();
  // The slot's bound batch id. REQUIRES: `claim` is held.
  uint64_t batch_id(const SlotClaim& claim) const;
  // READING -> FREE, recording the consumption in the ledger.
  void release(SlotClaim& claim);

 private:
  std::unique_ptr<WorkerSession> session_;
  WaitMode mode_;
  uint64_t rng_state_;
};

}  // namespace hsring::bench
