#include "shm/slot_view.h"

#include <fmt/format.h>

#include "common/contract.h"

namespace hsring {

LayerRows layer_rows(const Ring& ring, uint32_t slot, uint32_t layer) noexcept {
  const RingShape& s = ring.shape();
  HSRING_REQUIRE(slot < ring.slot_count() && layer < s.num_layers);
  const uint64_t row_bytes = uint64_t(s.hidden_size) * dtype_size(s.dtype);
  if (s.split_layers) return {ring.layer_region(slot, layer), row_bytes, row_bytes};
  return {ring.layer_region(slot, 0) + layer * row_bytes, row_bytes * s.num_layers, row_bytes};
}

SlotView::SlotView(const Ring& ring, uint32_t slot) noexcept : ring_(&ring), slot_(slot) {
  const SlotHeader& h = ring.slot(slot);
  batch_id_ = h.batch_id.load(std::memory_order_relaxed);
  token_count_ = h.token_count.load(std::memory_order_relaxed);
  num_docs_ = h.num_docs.load(std::memory_order_relaxed);
  length_bucket_ = h.length_bucket.load(std::memory_order_relaxed);
  max_tokens_ = ring.shape().max_tokens;
  // The one bounds check: every span and row below is bounded by these counts, and the
  // regions hold max_tokens rows (doc_offsets max_tokens + 1 entries).
  in_bounds_ = token_count_ >= 1 && token_count_ <= max_tokens_ && num_docs_ >= 1 &&
               num_docs_ <= token_count_;
  tokens_ = ring.tokens(slot);
  positions_ = ring.positions(slot);
  doc_offsets_ = ring.doc_offsets(slot);
  labels_ = ring.labels(slot);
}

std::string SlotView::bounds_problem() const {
  if (in_bounds_) return "";
  if (token_count_ < 1 || token_count_ > max_tokens_)
    return fmt::format("token count {} outside [1, {}]", token_count_, max_tokens_);
  return fmt::format("document count {} outside [1, {}]", num_docs_, token_count_);
}

LayerRows SlotView::layer(uint32_t layer) const noexcept {
  HSRING_REQUIRE(layer < layers());
  if (!in_bounds_) return {};
  return layer_rows(*ring_, slot_, layer);
}

std::span<const std::byte> SlotView::region_bytes(uint32_t region) const noexcept {
  if (ring_ == nullptr) return {};
  const RingShape& s = ring_->shape();
  HSRING_REQUIRE(s.split_layers ? region < s.num_layers : region == 0);
  if (!in_bounds_) return {};
  const uint64_t row =
      uint64_t(s.hidden_size) * dtype_size(s.dtype) * (s.split_layers ? 1 : s.num_layers);
  return {ring_->layer_region(slot_, region), size_t(row * token_count_)};
}

}  // namespace hsring
