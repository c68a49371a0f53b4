// The keys and values a decode keeps between target forwards (`hsring eval --gpu`, the GPU
// decoder of eval/gpu_speculative_decode.h), so that a forward computes only the new tokens
// of each sequence. `sequences` slots of up to `capacity` tokens: row slot * capacity + p
// of every attention layer's K and V (bf16, [rows, kv_dim]) holds position p of that slot.
// A forward's queries and attention outputs go through rows laid out the same way, since
// the attention kernel (launch_attention) finds a query's keys by its row: a
// tile of a slot's new rows reads keys from the slot's first row to its own.
//
// Rolling back is free: a slot's positions past what its next forward says is cached are
// never read, and that forward overwrites them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "gpu/cuda_handles.h"
#include "model/cuda_kernels.h"
#include "model/model_config.h"

namespace hsring {

class CudaKvCache {
 public:
  // On the current device (the model's GPU). Throws Error(kModelBadConfig) for a model the cache
  // cannot serve (cache_problem), Error(kCuda) when the memory is not there.
  CudaKvCache(const ModelConfig& config, uint32_t sequences, uint32_t capacity);

  uint32_t sequences() const { return sequences_; }
  uint32_t capacity() const { return capacity_; }
  Bf16* keys(uint32_t layer) const;
  Bf16* values(uint32_t layer) const;
  Bf16* queries() const { return queries_.as<Bf16>(); }            // [rows, q_dim]
  Bf16* outputs() const { return outputs_.as<Bf16>(); }            // [rows, q_dim]
  int32_t* row_index() const { return row_index_.as<int32_t>(); }  // a forward's cache rows
  uint64_t bytes() const;

 private:
  uint32_t sequences_ = 0, capacity_ = 0, kv_dim_ = 0;
  gpu::DeviceBuffer keys_, values_, queries_, outputs_, row_index_;
};

// Why `config` cannot decode with a KV cache, or "" when it can: the DeltaNet layers of a
// hybrid model keep a recurrent state the cache does not hold, and dynamic NTK RoPE's angles
// depend on the whole sequence's length.
std::string cache_problem(const ModelConfig& config);

// Which cached prefix each document of a batch continues: document d's tokens stand at
// positions cached[d] .. of slot slot[d], whose positions [0, cached[d]) hold the keys and
// values of earlier forwards; its RoPE positions must be those positions.
struct CachedPrefix {
  CudaKvCache* cache = nullptr;
  std::span<const int32_t> slot, cached;
};

// The attention tiles of a forward over the new rows of each document (their cache rows,
// `pack` query heads a tile) and each batch row's cache row, for a cache of `sequences`
// slots of `capacity` positions (a CachedPrefix's slot and cached). Throws Error(kModel) when
// the prefix does not describe the batch: a document count that differs, a slot outside the
// cache, a sequence past its capacity, or positions that are not cached[d] + j.
struct CachedLayout {
  std::vector<AttentionTile> tiles;
  std::vector<int32_t> rows;  // [T]
};
CachedLayout cached_layout(std::span<const int32_t> doc_offsets, std::span<const int32_t> positions,
                           std::span<const int32_t> slot, std::span<const int32_t> cached,
                           uint32_t sequences, uint32_t capacity, uint32_t pack);

}  // namespace hsring
