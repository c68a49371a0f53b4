#include "worker/synthetic_batch.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/random.h"
#include "shm/ring.h"

namespace hsring {

namespace {

constexpr uint32_t kSyntheticVocab = 32000;
constexpr uint32_t kLengthBuckets = 8;

std::string mismatch(uint64_t batch_id, const std::string& what) {
  return fmt::format("batch {}: {}", batch_id, what);
}

// Where element (token, dim) of `layer` lives in slot `slot`, split or concatenated.
std::byte* element_row(const Ring& ring, uint32_t slot, uint32_t layer, uint32_t token) {
  const RingShape& s = ring.shape();
  const uint64_t elem = dtype_size(s.dtype);
  if (s.split_layers)
    return ring.layer_region(slot, layer) + uint64_t(token) * s.hidden_size * elem;
  return ring.payload(slot) + (uint64_t(token) * s.num_layers + layer) * s.hidden_size * elem;
}

template <class Bits>
void fill_row(Bits* row, uint64_t batch_id, uint32_t layer, uint32_t token, uint32_t hidden) {
  for (uint32_t d = 0; d < hidden; ++d)
    row[d] = Bits(synthetic_element_bits(batch_id, layer, token, d, sizeof(Bits)));
}

template <class Bits>
bool row_matches(const Bits* row, uint64_t batch_id, uint32_t layer, uint32_t token,
                 uint32_t hidden, uint32_t& bad_dim) {
  for (uint32_t d = 0; d < hidden; ++d) {
    if (row[d] != Bits(synthetic_element_bits(batch_id, layer, token, d, sizeof(Bits)))) {
      bad_dim = d;
      return false;
    }
  }
  return true;
}

// Document boundaries of a batch: deterministic cut points, cu_seqlens style.
uint32_t plan_docs(uint64_t batch_id, uint32_t token_count, int32_t* offsets) {
  uint64_t rng = mix64(batch_id ^ 0xD0C5ull);
  uint32_t docs = 0;
  uint32_t at = 0;
  while (at < token_count) {
    if (offsets) offsets[docs] = int32_t(at);
    const uint32_t room = token_count - at;
    const uint32_t length = 1 + uint32_t(splitmix64(rng) % std::max<uint32_t>(1, room));
    at += std::min(length, room);
    ++docs;
  }
  if (offsets) offsets[docs] = int32_t(token_count);
  return docs;
}

}  // namespace

BatchPlan plan_batch(uint64_t batch_id, const RingShape& shape) {
  BatchPlan plan;
  plan.batch_id = batch_id;
  const uint32_t low = std::max<uint32_t>(1, shape.max_tokens / 2);
  plan.token_count = low + uint32_t(mix64(batch_id) % (shape.max_tokens - low + 1));
  plan.num_docs = plan_docs(batch_id, plan.token_count, nullptr);
  plan.length_bucket =
      uint32_t(uint64_t(plan.token_count) * kLengthBuckets / (shape.max_tokens + 1));
  return plan;
}

int32_t synthetic_token(uint64_t batch_id, uint32_t token) {
  return int32_t(mix64(batch_id * 0x100000001B3ull + token) % kSyntheticVocab);
}

void fill_synthetic_batch(const Ring& ring, uint32_t slot, const BatchPlan& plan) {
  const RingShape& s = ring.shape();
  const uint32_t elem = dtype_size(s.dtype);
  for (uint32_t layer = 0; layer < s.num_layers; ++layer) {
    for (uint32_t t = 0; t < plan.token_count; ++t) {
      std::byte* row = element_row(ring, slot, layer, t);
      if (elem == 4)
        fill_row(reinterpret_cast<uint32_t*>(row), plan.batch_id, layer, t, s.hidden_size);
      else
        fill_row(reinterpret_cast<uint16_t*>(row), plan.batch_id, layer, t, s.hidden_size);
    }
  }
  fill_synthetic_metadata(ring, slot, plan);
}

void fill_synthetic_metadata(const Ring& ring, uint32_t slot, const BatchPlan& plan) {
  int32_t* offsets = ring.doc_offsets(slot);
  plan_docs(plan.batch_id, plan.token_count, offsets);
  int32_t* tokens = ring.tokens(slot);
  int32_t* positions = ring.positions(slot);
  int32_t* labels = ring.labels(slot);
  for (uint32_t d = 0; d < plan.num_docs; ++d) {
    for (int32_t t = offsets[d]; t < offsets[d + 1]; ++t) {
      tokens[t] = synthetic_token(plan.batch_id, uint32_t(t));
      positions[t] = t - offsets[d];
      // The next token of the same document; none past a document's end.
      labels[t] = t + 1 < offsets[d + 1] ? synthetic_token(plan.batch_id, uint32_t(t) + 1) : -100;
    }
  }
}

std::string verify_synthetic_batch(const Ring& ring, uint32_t slot) {
  // Metadata first: it bounds every later read (invariant 7: nothing trusted blindly).
  if (std::string problem = verify_synthetic_metadata(ring, slot); !problem.empty()) return problem;
  const RingShape& s = ring.shape();
  const uint64_t batch_id = ring.slot(slot).batch_id.load(std::memory_order_relaxed);
  const BatchPlan plan = plan_batch(batch_id, s);
  const uint32_t elem = dtype_size(s.dtype);
  for (uint32_t layer = 0; layer < s.num_layers; ++layer) {
    for (uint32_t t = 0; t < plan.token_count; ++t) {
      const std::byte* row = element_row(ring, slot, layer, t);
      uint32_t bad_dim = 0;
      const bool ok = elem == 4 ? row_matches(reinterpret_cast<const uint32_t*>(row), batch_id,
                                              layer, t, s.hidden_size, bad_dim)
                                : row_matches(reinterpret_cast<const uint16_t*>(row), batch_id,
                                              layer, t, s.hidden_size, bad_dim);
      if (!ok)
        return mismatch(batch_id, fmt::format("hidden state differs at layer {}, token {}, dim {}",
                                              layer, t, bad_dim));
    }
  }
  return "";
}

std::string verify_synthetic_metadata(const Ring& ring, uint32_t slot) {
  const RingShape& s = ring.shape();
  const SlotHeader& header = ring.slot(slot);
  const uint64_t batch_id = header.batch_id.load(std::memory_order_relaxed);
  const BatchPlan plan = plan_batch(batch_id, s);
  const uint32_t tokens = header.token_count.load(std::memory_order_relaxed);
  const uint32_t docs = header.num_docs.load(std::memory_order_relaxed);
  if (tokens != plan.token_count || tokens > s.max_tokens)
    return mismatch(batch_id, fmt::format("token count {}, expected {}", tokens, plan.token_count));
  if (docs != plan.num_docs)
    return mismatch(batch_id, fmt::format("document count {}, expected {}", docs, plan.num_docs));
  if (header.length_bucket.load(std::memory_order_relaxed) != plan.length_bucket)
    return mismatch(batch_id, "wrong length bucket");

  std::vector<int32_t> offsets(plan.num_docs + 1);
  plan_docs(batch_id, plan.token_count, offsets.data());
  if (std::memcmp(offsets.data(), ring.doc_offsets(slot), offsets.size() * sizeof(int32_t)) != 0)
    return mismatch(batch_id, "document offsets differ");
  const int32_t* token_ids = ring.tokens(slot);
  const int32_t* positions = ring.positions(slot);
  const int32_t* labels = ring.labels(slot);
  for (uint32_t d = 0; d < plan.num_docs; ++d) {
    for (int32_t t = offsets[d]; t < offsets[d + 1]; ++t) {
      const int32_t label =
          t + 1 < offsets[d + 1] ? synthetic_token(batch_id, uint32_t(t) + 1) : -100;
      if (token_ids[t] != synthetic_token(batch_id, uint32_t(t)) ||
          positions[t] != t - offsets[d] || labels[t] != label)
        return mismatch(batch_id, fmt::format("token metadata differs at token {}", t));
    }
  }
  return "";
}

}  // namespace hsring
