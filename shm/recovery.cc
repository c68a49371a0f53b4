#include "shm/recovery.h"

#include "common/clock.h"
#include "shm/futex.h"
#include "shm/ledger.h"
#include "shm/liveness.h"
#include "shm/ordered_claims.h"
#include "shm/slot_hints.h"
#include "shm/slot_transition.h"

namespace hsring {

void recover_slot_as_seen(Ring& ring, uint32_t index, SlotState seen, RecoveryStats& stats) {
  SlotHeader& slot = ring.slot(index);
  RingHeader& header = ring.header();
  switch (seen.phase()) {
    case SlotPhase::kClaimed:
      if (transition_slot(ring, index, seen, seen.next(SlotPhase::kFree, 0, 0))) {
        ++stats.freed;
        notify_slot_change(ring, SharedCondition(header.free_futex, header.free_waiters));
      }
      return;
    case SlotPhase::kReading: {
      // `seen` may be stale: the consumer may have finished, freed the slot and died since,
      // and a producer rebound the slot to another batch. Acquire pairs with bind_batch's
      // release store, so if we read a rebound id, the rebinding claim happens before the
      // re-read below, which then cannot still see `seen`. Checked before the ledger mark:
      // marking another batch with this claim's word would count it consumed twice.
      const uint64_t batch_id = slot.batch_id.load(std::memory_order_acquire);
      if (slot.state.load(std::memory_order_relaxed) != seen.word()) return;
      // Acquire pairs with the consumer's release store of consumed_word.
      if (slot.consumed_word.load(std::memory_order_acquire) == seen.word()) {
        // It finished and died before freeing: repeat its (idempotent) ledger mark.
        ledger_mark_consumed(ring, batch_id, seen);
        if (transition_slot(ring, index, seen, seen.next(SlotPhase::kFree, 0, 0))) {
          ++stats.freed;
          notify_slot_change(ring, SharedCondition(header.free_futex, header.free_waiters));
        }
      } else if (transition_slot(ring, index, seen, seen.next(SlotPhase::kReady, 0, 0))) {
        ++stats.redelivered;
        ledger_mark_redelivered(ring, batch_id);
        notify_slot_change(ring, SharedCondition(header.ready_futex, header.ready_waiters));
      }
      return;
    }
    case SlotPhase::kWriting:
      ++stats.orphaned;  // bound batch: its target's successor adopts it
      return;
    case SlotPhase::kFree:
    case SlotPhase::kReady:
      return;
  }
}

namespace {

void count_recoveries(Ring& ring, const RecoveryStats& stats) {
  if (stats.total() > 0)
    ring.header().slots_recovered.fetch_add(stats.total(), std::memory_order_relaxed);
}

}  // namespace

bool owner_alive(const Ring& ring, uint32_t index, uint32_t epoch) {
  if (index >= ring.process_count()) return false;
  const uint32_t current = ring.process(index).epoch.load(std::memory_order_acquire);
  if ((current & SlotState::kEpochMask) != (epoch & SlotState::kEpochMask)) return false;
  // Our own mapping holds our lock: the probe cannot see it, but we are alive.
  if (ring.liveness_index() == int32_t(index)) return true;
  return liveness_lock_held_elsewhere(ring.fd(), index);
}

RecoveryStats recover_dead_owners(Ring& ring) {
  RecoveryStats stats;
  for (uint32_t i = 0; i < ring.slot_count(); ++i) {
    const SlotState seen(ring.slot(i).state.load(std::memory_order_acquire));
    if (seen.owned() && !owner_alive(ring, seen.owner(), seen.epoch()))
      recover_slot_as_seen(ring, i, seen, stats);
  }
  stats.hints = repair_hints(ring);
  count_recoveries(ring, stats);
  return stats;
}

RecoveryStats recover_previous_epochs(Ring& ring, Identity self) {
  RecoveryStats stats;
  for (uint32_t i = 0; i < ring.slot_count(); ++i) {
    const SlotState seen(ring.slot(i).state.load(std::memory_order_acquire));
    if (seen.owned() && seen.owner() == self.index && !seen.held_by(self.index, self.epoch))
      recover_slot_as_seen(ring, i, seen, stats);
  }
  stats.hints = repair_hints(ring);
  count_recoveries(ring, stats);
  return stats;
}

std::vector<SlotClaim> adopt_previous_writes(Ring& ring, Identity self) {
  std::vector<SlotClaim> adopted;
  for (uint32_t i = 0; i < ring.slot_count(); ++i) {
    const SlotState seen(ring.slot(i).state.load(std::memory_order_acquire));
    if (seen.phase() != SlotPhase::kWriting || seen.owner() != self.index ||
        seen.held_by(self.index, self.epoch)) {
      continue;
    }
    const SlotState mine = seen.next(SlotPhase::kWriting, self.index, self.epoch);
    if (transition_slot(ring, i, seen, mine)) adopted.push_back(SlotClaim{i, mine});
  }
  if (!adopted.empty())
    ring.header().slots_adopted.fetch_add(adopted.size(), std::memory_order_relaxed);
  return adopted;
}

}  // namespace hsring
