#include "shm/copy_ticket.h"

#include "shm/slot_transition.h"

namespace hsring {

bool read_pending_copy(const Ring& ring, const SlotClaim& claim, PendingCopy& pending) noexcept {
  const SlotHeader& slot = ring.slot(claim.index);
  // Acquire: pairs with settle_copy's release CAS (a done ticket orders the payload).
  const uint64_t ticket = slot.copy_ticket.load(std::memory_order_acquire);
  if (!copy_pending(ticket)) return false;
  pending.ticket = ticket;
  // Relaxed: stored before the producer's release CAS to READY, which our claim acquired.
  pending.producer = slot.producer.load(std::memory_order_relaxed);
  pending.producer_epoch = slot.producer_epoch.load(std::memory_order_relaxed);
  std::memcpy(pending.event.handle, slot.copy_event, kCopyEventBytes);
  return true;
}

bool copy_settled(const Ring& ring, const SlotClaim& claim, const PendingCopy& pending) noexcept {
  // Acquire: pairs with settle_copy's release CAS.
  return ring.slot(claim.index).copy_ticket.load(std::memory_order_acquire) != pending.ticket;
}

bool settle_copy(Ring& ring, uint32_t index, uint64_t ticket) noexcept {
  uint64_t expected = ticket;
  // Release: the host saw the copy complete (cudaEventSynchronize) before this store, so a
  // consumer that acquires the settled ticket reads a complete payload. Tickets are unique
  // (publish sequence numbers), so a slot republished since is never touched.
  return ring.slot(index).copy_ticket.compare_exchange_strong(
      expected, ticket & ~uint64_t(1), std::memory_order_release, std::memory_order_relaxed);
}

SlotResult give_back_unwritten(Ring& ring, SlotClaim& claim, const PendingCopy& pending) noexcept {
  if (claim.word.phase() != SlotPhase::kReading || pending.producer >= ring.shape().num_targets)
    return SlotResult(SlotStatus::kLost);
  // The batch id stays bound: WRITING(dead producer) is exactly what a target that died
  // mid-copy leaves, and its successor adopts such slots (recovery.h).
  if (!advance_claim(
          ring, claim,
          claim.word.next(SlotPhase::kWriting, pending.producer, pending.producer_epoch)))
    return SlotResult(SlotStatus::kLost);
  // Release: the WRITING word above happens before a successor's acquire of the count, so
  // the rescan it triggers finds the slot.
  ring.target_progress(pending.producer).returned.fetch_add(1, std::memory_order_release);
  return SlotResult(SlotStatus::kOk);
}

}  // namespace hsring
