// The batch ledger: per batch id, whether it was published and which claim consumed it.
// It is how a run proves "nothing lost, nothing twice" across crashes. Every mark is
// idempotent for one claim, so a process that dies between a mark and the transition it
// accompanies, and a recoverer that repeats the mark, never double-count.
#pragma once

#include <cstdint>

#include "shm/ring.h"
#include "shm/slot_state.h"

namespace hsring {

void ledger_mark_published(Ring& ring, uint64_t batch_id) noexcept;
void ledger_mark_redelivered(Ring& ring, uint64_t batch_id) noexcept;
void ledger_mark_torn(Ring& ring, uint64_t batch_id) noexcept;

enum class ConsumeMark { kFirst, kRepeat, kDuplicate, kUntracked };
// Marks `batch_id` consumed by the claim whose READING word is `word` (and published).
ConsumeMark ledger_mark_consumed(Ring& ring, uint64_t batch_id, SlotState word) noexcept;

struct LedgerTotals {
  uint64_t published = 0;
  uint64_t consumed = 0;
  uint64_t duplicated = 0;   // batches consumed by more than one claim
  uint64_t redelivered = 0;  // consumed after a dead consumer's slot went back to READY
  uint64_t torn = 0;
  uint64_t lost = 0;     // published, never consumed, and not in the ring now
  uint64_t in_ring = 0;  // READY or READING slots now
};
// Walks the ledger up to `id_limit` ids (the ledger's capacity when 0) and the slots.
LedgerTotals ledger_totals(const Ring& ring, uint64_t id_limit = 0);

// Distinct consumed batches among ids [0, id_limit).
uint64_t ledger_count_consumed(const Ring& ring, uint64_t id_limit);

}  // namespace hsring
