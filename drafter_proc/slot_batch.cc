#include "drafter_proc/slot_batch.h"

#include <cmath>
#include <cstring>
#include <string>

#include "model/float_convert.h"
#include "shm/ring.h"

namespace hsring {

namespace {

// Widens `count` elements of `dtype` at `src` into fp32.
void widen(const std::byte* src, uint64_t count, DType dtype, float* dst) {
  if (dtype == DType::kFP32) {
    std::memcpy(dst, src, count * 4);
    return;
  }
  for (uint64_t i = 0; i < count; ++i) {
    uint16_t bits;
    std::memcpy(&bits, src + 2 * i, 2);
    dst[i] = dtype == DType::kBF16 ? bf16_to_float(bits) : fp16_to_float(bits);
  }
}

}  // namespace

void SlotBatch::copy_from(const Ring& ring, uint32_t slot) {
  copy_metadata(ring, slot);
  const RingShape& s = ring.shape();
  const uint32_t t = tokens();
  const uint64_t h = s.hidden_size, k = s.num_layers, elem = dtype_size(s.dtype);
  features_.resize(t * k * h);
  if (s.split_layers) {
    // Region k holds [T, H]: row r of layer k goes to features[r, k*H .. (k+1)*H).
    for (uint32_t layer = 0; layer < k; ++layer) {
      const std::byte* region = ring.layer_region(slot, layer);
      for (uint32_t r = 0; r < t; ++r)
        widen(region + (r * h) * elem, h, s.dtype, features_.data() + r * k * h + layer * h);
    }
  } else {
    widen(ring.layer_region(slot, 0), t * k * h, s.dtype, features_.data());
  }
}

void SlotBatch::copy_metadata(const Ring& ring, uint32_t slot) {
  const SlotHeader& header = ring.slot(slot);
  const uint32_t t = header.token_count.load(std::memory_order_relaxed);
  const uint32_t docs = header.num_docs.load(std::memory_order_relaxed);
  features_.clear();
  tokens_.assign(ring.tokens(slot), ring.tokens(slot) + t);
  positions_.assign(ring.positions(slot), ring.positions(slot) + t);
  doc_offsets_.assign(ring.doc_offsets(slot), ring.doc_offsets(slot) + docs + 1);
  labels_.assign(ring.labels(slot), ring.labels(slot) + t);
}

std::string SlotBatch::features_problem(uint32_t layers) const {
  if (features_.empty() || tokens_.empty()) return "";
  const size_t row = features_.size() / tokens_.size();
  for (size_t i = 0; i < features_.size(); ++i) {
    if (std::isfinite(features_[i])) continue;
    const size_t per_layer = layers ? row / layers : row;
    const char* value = std::isnan(features_[i]) ? "NaN" : features_[i] > 0 ? "+Inf" : "-Inf";
    return "token " + std::to_string(i / row) + ", captured layer " +
           std::to_string((i % row) / per_layer) + ", element " +
           std::to_string((i % row) % per_layer) + " is " + value;
  }
  return "";
}

train::DrafterBatch SlotBatch::view() const {
  return train::DrafterBatch{features_, tokens_, positions_, doc_offsets_, labels_};
}

}  // namespace hsring
