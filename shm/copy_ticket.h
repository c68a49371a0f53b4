// Early publish: a GPU producer may publish a slot as soon as its D2H copy is enqueued,
// with a copy ticket saying the payload is complete only once the producer's exported
// CUDA IPC event has completed (docs/ring-protocol.md, "Early publish"). The ring keeps
// invariant 2 (no consumer reads incomplete data) by moving the wait to the consumer,
// which polls, never waits on, the foreign event (invariant 6):
//
//   producer: WRITING -> READY with the ticket pending (publish(.., pending));
//             after its own copy event has completed: settle_copy (pending -> done)
//   consumer: READY -> READING, then copy_state(): kComplete (ticket done, or the event
//             polled complete while its producer lives) -> read; kPending -> poll again;
//             producer dead with the copy pending -> give_back_unwritten:
//             READING -> WRITING(producer, its dead epoch), batch id kept, for the
//             producer's next incarnation to adopt and write again (as a dead target's
//             own WRITING slot is adopted), and TargetProgress.returned bumped.
#pragma once

#include <cstdint>
#include <cstring>

#include "shm/ring.h"
#include "shm/slot_claim.h"
#include "shm/slot_result.h"

namespace hsring {

inline constexpr size_t kCopyEventBytes = 64;  // sizeof(cudaIpcEventHandle_t)

// The producer's exported event for one slot's copy, as stored in the slot header.
struct CopyEvent {
  unsigned char handle[kCopyEventBytes] = {};
};

// The ticket a publish stores: its publish sequence number and whether the copy is pending.
constexpr uint64_t make_copy_ticket(uint64_t publish_seq, bool pending) {
  return (publish_seq << 1) | (pending ? 1u : 0u);
}
constexpr bool copy_pending(uint64_t ticket) { return (ticket & 1u) != 0; }

// What a consumer holding a claimed slot knows of its payload.
struct PendingCopy {
  uint64_t ticket = 0;    // the pending ticket read at the claim
  uint32_t producer = 0;  // process index of the publisher
  uint32_t producer_epoch = 0;
  CopyEvent event;  // the producer's exported event (untrusted bytes)
};

// Reads the claimed slot's copy ticket (acquire: pairs with settle_copy's release, so a
// settled ticket means the payload is in host memory). True and `pending` filled when the
// copy may still be running; false when the payload is complete.
// REQUIRES: `claim` is a READING claim of the caller.
bool read_pending_copy(const Ring& ring, const SlotClaim& claim, PendingCopy& pending) noexcept;

// True once the producer has settled `pending`'s ticket (its own copy event completed).
bool copy_settled(const Ring& ring, const SlotClaim& claim, const PendingCopy& pending) noexcept;

// The producer's half, after its own copy event has completed: pending -> done. A slot
// that has moved on (consumed and republished: another ticket) is left alone, so this is
// safe on a slot the caller no longer owns. True when this call settled it.
bool settle_copy(Ring& ring, uint32_t index, uint64_t ticket) noexcept;

// Gives a claimed, unread slot back to its dead producer's next incarnation:
// READING(self) -> WRITING(producer, producer_epoch), batch id kept, then bumps
// TargetProgress.returned of that target. kLost when the claim was lost meanwhile.
// REQUIRES: the producer incarnation is dead (owner_alive false) and is a target.
SlotResult give_back_unwritten(Ring& ring, SlotClaim& claim, const PendingCopy& pending) noexcept;

}  // namespace hsring
