// A training batch copied out of a ring slot: the K captured layers of each token as one
// fp32 row [K*H] (the drafter's input), and the token metadata. Copying lets the drafter
// release the slot before its step, so targets refill it while it trains.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/drafter_batch.h"

namespace hsring {

class SlotView;

class SlotBatch {
 public:
  // Copies the claimed batch, as long as its view's header says (REQUIRES: the slot is
  // held, READING, and check_model_metadata() passed; a view out of bounds copies an empty
  // batch). Buffers are reused.
  void copy_from(const SlotView& batch);
  // The token metadata alone (the features travel to a GPU instead); view().features is
  // then empty.
  void copy_metadata(const SlotView& batch);
  // A view of the last copy; valid until the next copy_from.
  train::DrafterBatch view() const;
  uint32_t tokens() const { return uint32_t(tokens_.size()); }
  // "" when every copied feature is finite, else the first that is not: its token, which
  // of the `layers` captured layers, element and value. One pass over the features: for
  // explaining a loss that is not finite, not for every batch.
  std::string features_problem(uint32_t layers) const;

 private:
  std::vector<float> features_;  // [T, K*H]
  std::vector<int32_t> tokens_, positions_, doc_offsets_, labels_;
};

}  // namespace hsring
