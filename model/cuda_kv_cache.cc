#include "model/cuda_kv_cache.h"

#include <fmt/format.h>

#include <string>

#include "common/error.h"

namespace hsring {

std::string cache_problem(const ModelConfig& config) {
  if (config.hybrid())
    return "its DeltaNet layers keep a recurrent state the KV cache does not hold";
  if (config.rope.type == RopeType::kDynamic)
    return "dynamic NTK RoPE's angles depend on the whole sequence's length";
  return "";
}

CudaKvCache::CudaKvCache(const ModelConfig& config, uint32_t sequences, uint32_t capacity)
    : sequences_(sequences), capacity_(capacity), kv_dim_(config.kv_dim()) {
  if (const std::string problem = cache_problem(config); !problem.empty())
    throw Error(Errc::kModelBadConfig,
                "model '" + config.name + "' cannot decode with a KV cache: " + problem);
  const uint64_t rows = uint64_t(sequences) * capacity;
  const uint64_t kv = uint64_t(config.num_layers) * rows * kv_dim_ * sizeof(Bf16);
  keys_ = gpu::DeviceBuffer::allocate(kv);
  values_ = gpu::DeviceBuffer::allocate(kv);
  queries_ = gpu::DeviceBuffer::allocate(rows * config.q_dim() * sizeof(Bf16));
  outputs_ = gpu::DeviceBuffer::allocate(rows * config.q_dim() * sizeof(Bf16));
  row_index_ = gpu::DeviceBuffer::allocate(rows * sizeof(int32_t));
}

Bf16* CudaKvCache::keys(uint32_t layer) const {
  return keys_.as<Bf16>() + uint64_t(layer) * sequences_ * capacity_ * kv_dim_;
}

Bf16* CudaKvCache::values(uint32_t layer) const {
  return values_.as<Bf16>() + uint64_t(layer) * sequences_ * capacity_ * kv_dim_;
}

uint64_t CudaKvCache::bytes() const {
  return keys_.size() + values_.size() + queries_.size() + outputs_.size() + row_index_.size();
}

CachedLayout cached_layout(std::span<const int32_t> doc_offsets, std::span<const int32_t> positions,
                           std::span<const int32_t> slots, std::span<const int32_t> cached_lengths,
                           uint32_t sequences, uint32_t capacity, uint32_t pack) {
  const auto bad = [](const std::string& what) {
    throw Error(Errc::kModel, "bad cached prefix: " + what);
  };
  const size_t docs = doc_offsets.size() - 1;
  if (slots.size() != docs || cached_lengths.size() != docs)
    bad(fmt::format("{} slots and {} cached lengths for {} documents", slots.size(),
                    cached_lengths.size(), docs));
  const int32_t tile_rows = int32_t(kAttentionTileRows / pack);
  CachedLayout out;
  out.rows.resize(positions.size());
  for (size_t d = 0; d < docs; ++d) {
    const int32_t slot = slots[d], cached = cached_lengths[d];
    const int32_t length = doc_offsets[d + 1] - doc_offsets[d];
    if (slot < 0 || uint32_t(slot) >= sequences)
      bad(fmt::format("slot {} of a cache of {}", slot, sequences));
    if (cached < 0 || int64_t(cached) + length > int64_t(capacity))
      bad(fmt::format("document {} reaches position {} of a slot of {}", d,
                      int64_t(cached) + length, capacity));
    const int32_t base = slot * int32_t(capacity);
    for (int32_t j = 0; j < length; ++j) {
      const size_t t = size_t(doc_offsets[d] + j);
      if (positions[t] != cached + j)
        bad(fmt::format("token {} has position {}, not {} after its {} cached", t, positions[t],
                        cached + j, cached));
      out.rows[t] = base + cached + j;
    }
    const int32_t end = base + cached + length;
    for (int32_t q = base + cached; q < end; q += tile_rows) out.tiles.push_back({q, base, end, 0});
  }
  return out;
}

}  // namespace hsring
