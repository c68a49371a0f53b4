#include "drafter_proc/slot_batch.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <string>

#include "model/float_convert.h"
#include "shm/slot_view.h"

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

void SlotBatch::copy_from(const SlotView& batch) {
  copy_metadata(batch);
  const RingShape& s = batch.shape();
  const uint32_t t = tokens();
  const uint64_t h = s.hidden_size, k = s.num_layers, elem = dtype_size(s.dtype);
  features_.resize(t * k * h);
  if (t == 0) return;  // out of bounds: nothing was copied
  if (s.split_layers) {
    // Region k holds [T, H]: row r of layer k goes to features[r, k*H .. (k+1)*H).
    for (uint32_t layer = 0; layer < k; ++layer) {
      const std::byte* region = batch.region_bytes(layer).data();
      for (uint32_t r = 0; r < t; ++r)
        widen(region + (r * h) * elem, h, s.dtype, features_.data() + r * k * h + layer * h);
    }
  } else {
    widen(batch.region_bytes(0).data(), t * k * h, s.dtype, features_.data());
  }
}

void SlotBatch::copy_metadata(const SlotView& batch) {
  features_.clear();
  const auto copy = [](std::span<const int32_t> from, std::vector<int32_t>& to) {
    to.assign(from.begin(), from.end());
  };
  copy(batch.tokens(), tokens_);
  copy(batch.positions(), positions_);
  copy(batch.doc_offsets(), doc_offsets_);
  copy(batch.labels(), labels_);
}

std::string SlotBatch::features_problem(uint32_t layers) const {
  if (features_.empty() || tokens_.empty()) return "";
  const size_t row = features_.size() / tokens_.size();
  for (size_t i = 0; i < features_.size(); ++i) {
    if (std::isfinite(features_[i])) continue;
    const size_t per_layer = layers ? row / layers : row;
    const char* value = std::isnan(features_[i]) ? "NaN" : features_[i] > 0 ? "+Inf" : "-Inf";
    return fmt::format("token {}, captured layer {}, element {} is {}", i / row,
                       (i % row) / per_layer, (i % row) % per_layer, value);
  }
  return "";
}

train::DrafterBatch SlotBatch::view() const {
  return train::DrafterBatch{features_, tokens_, positions_, doc_offsets_, labels_};
}

}  // namespace hsring
