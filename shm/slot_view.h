// A typed view of one claimed slot's batch: its header, read once, and its arrays as spans
// whose lengths come from that header, checked against the ring's validated shape here, in
// one place (docs/ring-protocol.md invariant 7: nothing in the segment is trusted). A view
// whose header does not fit the shape hands out empty spans and no rows, so no reader can
// be led past a slot's regions by a torn or forged header.
//
// The header fields are owner-written and ordered by the acquire claim (READY -> READING),
// so relaxed loads read what the producer published.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "common/contract.h"
#include "shm/ring.h"

namespace hsring {

// Where captured layer k's rows lie in a slot, in either layout: K regions [T, H] (rows
// H elements apart) or one [T, K*H] region (layer k in columns k*H .. (k+1)*H of each row).
// Host writes, CUDA pitched copies and consumers' views all use this one answer.
struct LayerRows {
  std::byte* first = nullptr;  // layer k's row 0
  uint64_t pitch = 0;          // bytes from one row to the next
  uint64_t row_bytes = 0;      // bytes of one row of one layer: H * elem
};
// REQUIRES: slot < ring.slot_count(), layer < ring.shape().num_layers.
LayerRows layer_rows(const Ring& ring, uint32_t slot, uint32_t layer) noexcept;

class SlotView {
 public:
  SlotView() = default;  // no slot: out of bounds, every span empty
  // Reads slot `slot`'s header. REQUIRES: slot < ring.slot_count(); the caller holds the
  // slot (READING), so its header and payload no longer change under a live producer.
  SlotView(const Ring& ring, uint32_t slot) noexcept;

  uint32_t slot() const { return slot_; }
  // The ring's validated shape. REQUIRES: a view of a slot (not default-constructed).
  const RingShape& shape() const {
    HSRING_REQUIRE(ring_ != nullptr);
    return ring_->shape();
  }
  uint64_t batch_id() const { return batch_id_; }
  // As the header says: bounded by in_bounds(), not by the view.
  uint32_t token_count() const { return token_count_; }
  uint32_t num_docs() const { return num_docs_; }
  uint32_t length_bucket() const { return length_bucket_; }

  // True when 1 <= token_count <= max_tokens and 1 <= num_docs <= token_count.
  bool in_bounds() const { return in_bounds_; }
  // "" when in_bounds(), else which count does not fit.
  std::string bounds_problem() const;

  // The batch's arrays: token_count entries (doc_offsets num_docs + 1); empty unless
  // in_bounds().
  std::span<const int32_t> tokens() const { return ints(tokens_, token_count_); }
  std::span<const int32_t> positions() const { return ints(positions_, token_count_); }
  std::span<const int32_t> doc_offsets() const { return ints(doc_offsets_, num_docs_ + 1); }
  std::span<const int32_t> labels() const { return ints(labels_, token_count_); }
  // Captured layer `layer`'s rows, rows() of them; first is null unless in_bounds().
  // REQUIRES: layer < layers().
  LayerRows layer(uint32_t layer) const noexcept;
  uint32_t rows() const { return in_bounds_ ? token_count_ : 0; }
  uint32_t layers() const { return ring_ ? ring_->shape().num_layers : 0; }
  // The bytes of every captured row of the batch in region `region` (split layout: layer
  // `region`'s [T, H]; concatenated: region 0, [T, K*H]); empty unless in_bounds().
  // REQUIRES: region < layers() in the split layout, region == 0 in the concatenated one.
  std::span<const std::byte> region_bytes(uint32_t region) const noexcept;

 private:
  std::span<const int32_t> ints(const int32_t* first, uint64_t count) const {
    if (!in_bounds_) return {};
    return {first, size_t(count)};
  }

  const Ring* ring_ = nullptr;
  uint32_t slot_ = 0;
  uint64_t batch_id_ = 0;
  uint32_t token_count_ = 0;
  uint32_t num_docs_ = 0;
  uint32_t length_bucket_ = 0;
  uint32_t max_tokens_ = 0;
  bool in_bounds_ = false;
  const int32_t* tokens_ = nullptr;
  const int32_t* positions_ = nullptr;
  const int32_t* doc_offsets_ = nullptr;
  const int32_t* labels_ = nullptr;
};

}  // namespace hsring
