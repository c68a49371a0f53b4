#include "worker/model_batch_check.h"

#include <fmt/format.h>

#include <cstring>

#include "shm/ring.h"
#include "shm/slot_view.h"

namespace hsring {

namespace {

std::string at(const char* what, uint32_t i) { return fmt::format("{}[{}]", what, i); }

// True when no element of `count` elements of `dtype` at `p` is an infinity or a NaN: the
// exponent field is all ones exactly for those.
bool all_finite(const std::byte* p, uint64_t count, DType dtype) {
  if (dtype == DType::kFP32) {
    for (uint64_t i = 0; i < count; ++i) {
      uint32_t bits;
      std::memcpy(&bits, p + 4 * i, 4);
      if ((bits & 0x7F800000u) == 0x7F800000u) return false;
    }
    return true;
  }
  const uint16_t exponent = dtype == DType::kBF16 ? 0x7F80u : 0x7C00u;
  for (uint64_t i = 0; i < count; ++i) {
    uint16_t bits;
    std::memcpy(&bits, p + 2 * i, 2);
    if ((bits & exponent) == exponent) return false;
  }
  return true;
}

}  // namespace

std::string check_model_metadata(const Ring& ring, uint32_t slot) {
  return check_model_metadata(SlotView(ring, slot));
}

std::string check_model_metadata(const SlotView& batch) {
  if (!batch.in_bounds()) return batch.bounds_problem();
  const RingShape& s = batch.shape();
  const uint32_t tokens = batch.token_count();
  const uint32_t docs = batch.num_docs();
  const std::span<const int32_t> offsets = batch.doc_offsets();
  const std::span<const int32_t> ids = batch.tokens();
  const std::span<const int32_t> positions = batch.positions();
  const std::span<const int32_t> labels = batch.labels();
  if (offsets[0] != 0 || offsets[docs] != int32_t(tokens))
    return fmt::format("document offsets run from {} to {}, not 0 to {}", offsets[0], offsets[docs],
                       tokens);
  for (uint32_t d = 0; d < docs; ++d) {
    if (offsets[d + 1] <= offsets[d]) return at("doc_offsets", d + 1) + " is not increasing";
    // Increasing from 0 keeps it above 0; this keeps the positions read below in the batch.
    if (offsets[d + 1] > int32_t(tokens))
      return fmt::format("{} is past the batch's {} tokens", at("doc_offsets", d + 1), tokens);
    for (int32_t t = offsets[d]; t < offsets[d + 1]; ++t) {
      if (positions[t] != t - offsets[d])
        return at("positions", t) + " does not restart with its document";
    }
  }
  const int64_t vocab = s.vocab_size;
  for (uint32_t t = 0; t < tokens; ++t) {
    if (ids[t] < 0 || ids[t] >= vocab)
      return fmt::format("{} = {} is outside the vocabulary", at("tokens", t), ids[t]);
    const bool label_ok = (labels[t] >= 0 && labels[t] < vocab) || labels[t] == kIgnoreLabel;
    if (!label_ok)
      return fmt::format("{} = {} is outside the vocabulary", at("labels", t), labels[t]);
  }
  return "";
}

std::string check_model_batch(const Ring& ring, uint32_t slot) {
  const SlotView batch(ring, slot);
  if (std::string problem = check_model_metadata(batch); !problem.empty()) return problem;
  const RingShape& s = ring.shape();
  const uint64_t rows = batch.rows();
  const uint32_t regions = s.split_layers ? s.num_layers : 1;
  const uint64_t per_region = rows * s.hidden_size * (s.split_layers ? 1 : s.num_layers);
  for (uint32_t k = 0; k < regions; ++k) {
    if (!all_finite(batch.region_bytes(k).data(), per_region, s.dtype))
      return fmt::format("captured layer region {} holds a NaN or an infinity", k);
  }
  return "";
}

}  // namespace hsring
