#include "shm/ledger.h"

#include <unordered_set>

namespace hsring {

// All ledger atomics are relaxed: marks are facts about single words, read by summaries
// after the run or by tests after the processes have exited (which orders everything).
void ledger_mark_published(Ring& ring, uint64_t batch_id) noexcept {
  if (LedgerEntry* e = ring.ledger_entry(batch_id))
    e->flags.fetch_or(kLedgerPublished, std::memory_order_relaxed);
}

void ledger_mark_redelivered(Ring& ring, uint64_t batch_id) noexcept {
  if (LedgerEntry* e = ring.ledger_entry(batch_id))
    e->flags.fetch_or(kLedgerRedelivered, std::memory_order_relaxed);
}

void ledger_mark_torn(Ring& ring, uint64_t batch_id) noexcept {
  if (LedgerEntry* e = ring.ledger_entry(batch_id))
    e->flags.fetch_or(kLedgerTorn, std::memory_order_relaxed);
}

ConsumeMark ledger_mark_consumed(Ring& ring, uint64_t batch_id, SlotState word) noexcept {
  LedgerEntry* e = ring.ledger_entry(batch_id);
  if (e == nullptr) return ConsumeMark::kUntracked;
  e->flags.fetch_or(kLedgerPublished, std::memory_order_relaxed);
  uint64_t expected = 0;
  if (e->consume_word.compare_exchange_strong(expected, word.word(), std::memory_order_relaxed))
    return ConsumeMark::kFirst;
  if (expected == word.word()) return ConsumeMark::kRepeat;
  e->duplicates.fetch_add(1, std::memory_order_relaxed);
  return ConsumeMark::kDuplicate;
}

LedgerTotals ledger_totals(const Ring& ring, uint64_t id_limit) {
  LedgerTotals totals;
  std::unordered_set<uint64_t> in_ring;
  for (uint32_t i = 0; i < ring.slot_count(); ++i) {
    const SlotHeader& slot = ring.slot(i);
    const SlotPhase phase = SlotState(slot.state.load(std::memory_order_acquire)).phase();
    if (phase == SlotPhase::kReady || phase == SlotPhase::kReading) {
      in_ring.insert(slot.batch_id.load(std::memory_order_relaxed));
      ++totals.in_ring;
    }
  }
  const uint64_t limit = id_limit == 0 ? ring.shape().ledger_capacity
                                       : std::min(id_limit, ring.shape().ledger_capacity);
  for (uint64_t id = 0; id < limit; ++id) {
    const LedgerEntry& e = *ring.ledger_entry(id);
    const uint32_t flags = e.flags.load(std::memory_order_relaxed);
    const bool consumed = e.consume_word.load(std::memory_order_relaxed) != 0;
    const bool published = (flags & kLedgerPublished) != 0 || consumed || in_ring.count(id) != 0;
    totals.published += published;
    totals.consumed += consumed;
    totals.duplicated += e.duplicates.load(std::memory_order_relaxed) != 0;
    totals.redelivered += consumed && (flags & kLedgerRedelivered) != 0;
    totals.torn += (flags & kLedgerTorn) != 0;
    totals.lost += published && !consumed && in_ring.count(id) == 0;
  }
  return totals;
}

uint64_t ledger_count_consumed(const Ring& ring, uint64_t id_limit) {
  uint64_t consumed = 0;
  const uint64_t limit = std::min(id_limit, ring.shape().ledger_capacity);
  for (uint64_t id = 0; id < limit; ++id)
    consumed += ring.ledger_entry(id)->consume_word.load(std::memory_order_relaxed) != 0;
  return consumed;
}

}  // namespace hsring
