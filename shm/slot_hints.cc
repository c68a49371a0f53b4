#include "shm/slot_hints.h"

#include "shm/ring.h"

namespace hsring {

namespace {

uint64_t bit_of(uint32_t index) noexcept { return uint64_t(1) << (index % 64); }

SlotPhase phase_of(const Ring& ring, uint32_t index) noexcept {
  // seq_cst: pairs with the seq_cst CAS of the word and RMWs of the bits (see
  // drop_stale_hint) so a stale-hint clearer and a transition's setter cannot both miss
  // each other (store-load order needs the single total order).
  const SlotState word(ring.slot(index).state.load(std::memory_order_seq_cst));
  return word.phase_valid() ? word.phase() : SlotPhase::kClaimed;
}

}  // namespace

SlotHintBits* hint_bits(Ring& ring, SlotPhase phase) noexcept {
  if (phase == SlotPhase::kFree) return &ring.header().free_hints;
  if (phase == SlotPhase::kReady) return &ring.header().ready_hints;
  return nullptr;
}

void hint_transition(Ring& ring, uint32_t index, SlotPhase from, SlotPhase to) noexcept {
  if (from == to) return;
  // seq_cst RMWs (plain locked instructions on x86): ordered after the state CAS in the
  // single total order, which drop_stale_hint's re-check relies on. The bits carry no
  // payload: the state word's acq_rel CAS orders the data.
  if (SlotHintBits* bits = hint_bits(ring, from))
    bits->words[index / 64].fetch_and(~bit_of(index), std::memory_order_seq_cst);
  if (SlotHintBits* bits = hint_bits(ring, to))
    bits->words[index / 64].fetch_or(bit_of(index), std::memory_order_seq_cst);
}

void drop_stale_hint(Ring& ring, uint32_t index, SlotPhase phase) noexcept {
  SlotHintBits* bits = hint_bits(ring, phase);
  if (bits == nullptr) return;
  bits->words[index / 64].fetch_and(~bit_of(index), std::memory_order_seq_cst);
  // If the word entered `phase` before our clear in the total order, this load sees it;
  // otherwise its setter's fetch_or comes after our clear. Either way the bit ends set.
  if (phase_of(ring, index) == phase)
    bits->words[index / 64].fetch_or(bit_of(index), std::memory_order_seq_cst);
}

void restore_hint(Ring& ring, uint32_t index, SlotPhase phase) noexcept {
  SlotHintBits* bits = hint_bits(ring, phase);
  if (bits == nullptr) return;
  std::atomic<uint64_t>& word = bits->words[index / 64];
  // seq_cst like every hint RMW; the peek is relaxed, a hint orders no data.
  if ((word.load(std::memory_order_relaxed) & bit_of(index)) == 0)
    word.fetch_or(bit_of(index), std::memory_order_seq_cst);
}

uint32_t repair_hints(Ring& ring) noexcept {
  uint32_t changed = 0;
  for (SlotPhase phase : {SlotPhase::kFree, SlotPhase::kReady}) {
    SlotHintBits* bits = hint_bits(ring, phase);
    for (uint32_t i = 0; i < ring.slot_count(); ++i) {
      const bool hinted = (bits->words[i / 64].load(std::memory_order_seq_cst) & bit_of(i)) != 0;
      const bool is = phase_of(ring, i) == phase;
      if (hinted == is) continue;
      ++changed;
      // A set bit is added directly; a clear goes through the re-check, since a live
      // actor may move the slot into `phase` while we repair.
      if (is)
        restore_hint(ring, i, phase);
      else
        drop_stale_hint(ring, i, phase);
    }
  }
  return changed;
}

uint32_t snapshot_hints(Ring& ring, SlotPhase phase, uint64_t* out) noexcept {
  SlotHintBits* bits = hint_bits(ring, phase);
  const uint32_t n = (ring.slot_count() + 63) / 64;
  for (uint32_t w = 0; w < n; ++w) {
    // Relaxed: a hint; the claim's acquire CAS on the state word orders the data.
    uint64_t word = bits->words[w].load(std::memory_order_relaxed);
    // Bits past slot_count would name no slot (a co-tenant could set them).
    if (w == n - 1 && ring.slot_count() % 64 != 0)
      word &= (uint64_t(1) << (ring.slot_count() % 64)) - 1;
    out[w] = word;
  }
  return n;
}

}  // namespace hsring
