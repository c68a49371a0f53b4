#include "shm/ordered_claims.h"

namespace hsring {

bool batch_consumed(const Ring& ring, uint64_t batch_id) noexcept {
  const LedgerEntry* entry = ring.ledger_entry(batch_id);
  // Relaxed, as every ledger word: a consumer sees its own marks, and another's mark seen
  // late only keeps the floor low a little longer.
  return entry != nullptr && entry->consume_word.load(std::memory_order_relaxed) != 0;
}

uint64_t next_unconsumed(const Ring& ring, uint64_t from, uint64_t stride) noexcept {
  HSRING_REQUIRE(stride >= 1);
  while (batch_consumed(ring, from)) from += stride;
  return from;
}

uint64_t advance_ordered_floor(Ring& ring) noexcept {
  std::atomic<uint64_t>& floor = ring.header().ordered_floor;
  // Relaxed: the floor orders nothing else (see the header); the CAS only keeps it from
  // moving backwards when two consumers advance it at once.
  uint64_t seen = floor.load(std::memory_order_relaxed);
  while (batch_consumed(ring, seen)) {
    if (floor.compare_exchange_weak(seen, seen + 1, std::memory_order_relaxed)) ++seen;
  }
  return seen;
}

bool inside_ordered_window(Ring& ring, uint64_t batch_id) noexcept {
  if (!ring.shape().ordered_claims) return true;
  const uint64_t window = ring.shape().slot_count;
  // Relaxed: see the header.
  if (batch_id < ring.header().ordered_floor.load(std::memory_order_relaxed) + window) return true;
  // A consumer that died between its ledger mark and its advance left the floor behind.
  return batch_id < advance_ordered_floor(ring) + window;
}

bool wait_for_ordered_window(Ring& ring, uint64_t batch_id,
                             std::chrono::nanoseconds timeout) noexcept {
  if (inside_ordered_window(ring, batch_id)) return true;
  SharedCondition freed(ring.header().free_futex, ring.header().free_waiters);
  return freed.wait_until([&] { return inside_ordered_window(ring, batch_id); }, timeout);
}

void notify_slot_change(const Ring& ring, SharedCondition condition) noexcept {
  if (ring.shape().ordered_claims)
    condition.notify_all();
  else
    condition.notify();
}

}  // namespace hsring
