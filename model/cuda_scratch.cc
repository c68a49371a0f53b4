#include "model/cuda_scratch.h"

#include <fmt/format.h>

#include <cstring>
#include <string>

#include "common/error.h"
#include "gpu/device.h"
#include "gpu/memlock.h"
#include "model/cuda_moe.h"
#include "model/cuda_weights.h"

namespace hsring {

namespace {

uint64_t align16(uint64_t bytes) { return (bytes + 15) / 16 * 16; }

// Attention tiles of any batch of `tokens` tokens: at most one per token plus one per
// document (attention_tiles), and documents <= tokens.
uint64_t max_tiles(uint32_t tokens) { return 2 * uint64_t(tokens); }

}  // namespace

void ForwardActivations::grow(const ModelConfig& c, uint32_t tokens, int gpu) {
  if (tokens <= capacity) return;
  const uint64_t t = tokens;
  const uint64_t h = c.hidden_size;
  const uint64_t qd = c.q_dim();
  const uint64_t kvd = c.kv_dim();
  const uint64_t inter = c.intermediate_size;
  const uint64_t half = c.rope_dim() / 2;
  const uint64_t q_rows = c.attention_gate ? 2 * qd : qd;
  const DeltaNetShape& dn = c.delta_net;
  const bool hybrid = c.hybrid();
  const bool moe = c.has_experts();
  const uint64_t slots = t * c.moe.experts_per_token;
  const uint64_t experts = c.moe.num_experts;
  struct Want {
    gpu::DeviceBuffer* buffer;
    uint64_t bytes;
  };
  const Want wants[] = {
      {&residual, t * h * 4},
      {&normed, t * h * 2},
      {&qkv, t * (q_rows + 2 * kvd) * 2},
      {&q, t * qd * 2},
      {&k, t * kvd * 2},
      {&v, t * kvd * 2},
      {&attn, t * qd * 2},
      {&gate_up, t * 2 * inter * 2},
      {&act, t * inter * 2},
      {&rope_cos, t * half * 4},
      {&rope_sin, t * half * 4},
      {&inputs, BatchInputs::max_bytes(tokens)},
      {&delta_proj, hybrid ? t * (uint64_t(dn.conv_dim()) + dn.v_dim() + 2 * dn.v_heads) * 2 : 0},
      {&delta_qkv, hybrid ? t * dn.conv_dim() * 2 : 0},
      {&delta_g, hybrid ? t * dn.v_heads * 4 : 0},
      {&delta_beta, hybrid ? t * dn.v_heads * 4 : 0},
      {&delta_scratch, hybrid ? delta_scratch_floats(tokens, dn) * 4 : 0},
      {&delta_out, hybrid ? t * dn.v_dim() * 2 : 0},
      {&delta_normed, hybrid ? t * dn.v_dim() * 2 : 0},
      {&normed_lo, moe ? t * h * 2 : 0},
      {&router_logits, moe ? t * router_rows(c) * 4 : 0},
      {&expert_choices, moe ? slots * sizeof(ExpertChoice) : 0},
      {&chunk_counts, moe ? uint64_t(group_chunks(slots)) * experts * 4 : 0},
      {&expert_begin, moe ? (experts + 1) * 4 : 0},
      {&slot_row, moe ? slots * 4 : 0},
      {&row_token, moe ? slots * 4 : 0},
      {&expert_tiles, moe ? max_expert_tiles(slots, uint32_t(experts)) * sizeof(ExpertTile) : 0},
      {&expert_gate_up, moe ? slots * 2 * c.moe.expert_intermediate * 2 : 0},
      {&expert_act, moe ? slots * c.moe.expert_intermediate * 2 : 0},
      {&expert_out, moe ? slots * h * 4 : 0},
      {&shared_gate_up, moe ? t * 2 * c.moe.shared_intermediate * 2 : 0},
      {&shared_act, moe ? t * c.moe.shared_intermediate * 2 : 0},
      {&shared_out, moe && c.moe.shared_intermediate ? t * h * 4 : 0},
  };
  uint64_t total = 0;
  for (const Want& w : wants) {
    *w.buffer = gpu::DeviceBuffer();  // free the smaller buffers first
    total += w.bytes;
  }
  capacity = 0;
  try {
    for (const Want& w : wants)
      if (w.bytes) *w.buffer = gpu::DeviceBuffer::allocate(w.bytes);
  } catch (const Error& e) {
    if (gpu::cuda_code(e) != cudaErrorMemoryAllocation) throw;
    for (const Want& w : wants) *w.buffer = gpu::DeviceBuffer();
    (void)cudaGetLastError();
    size_t free = 0, all = 0;
    (void)cudaMemGetInfo(&free, &all);
    throw gpu::cuda_error(cudaErrorMemoryAllocation,
                          fmt::format("model '{}' needs {} of GPU memory for the activations of a "
                                      "forward over {} tokens, but {} has {} free besides the "
                                      "weights",
                                      c.name, gpu::human_bytes(total), tokens,
                                      gpu::describe_gpu(gpu), gpu::human_bytes(free)));
  }
  capacity = tokens;
}

BatchInputs::BatchInputs(uint32_t tokens, uint32_t tiles, bool rope_bases, uint32_t delta_chunks,
                         uint32_t delta_documents)
    : tile_count(tiles), delta_chunk_count(delta_chunks), delta_document_count(delta_documents) {
  tokens_at = 0;
  positions_at = uint64_t(tokens) * 4;
  tiles_at = align16(positions_at + uint64_t(tokens) * 4);
  rope_bases_at = tiles_at + uint64_t(tiles) * sizeof(AttentionTile);  // 16-aligned
  delta_chunks_at = rope_bases_at + (rope_bases ? uint64_t(tokens) * sizeof(double) : 0);
  delta_documents_at = delta_chunks_at + uint64_t(delta_chunks) * sizeof(DeltaSpan);
  doc_starts_at = delta_documents_at + uint64_t(delta_documents) * sizeof(DeltaSpan);
  bytes = doc_starts_at + (delta_chunks ? uint64_t(tokens) * 4 : 0);
}

uint64_t BatchInputs::max_bytes(uint32_t tokens) {
  // Chunks: at most tokens + documents (delta_chunks), documents at most tokens.
  return align16(uint64_t(tokens) * 8) + max_tiles(tokens) * sizeof(AttentionTile) +
         uint64_t(tokens) * sizeof(double) + 3 * uint64_t(tokens) * sizeof(DeltaSpan) +
         uint64_t(tokens) * 4;
}

void InputStaging::upload(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                          std::span<const AttentionTile> tiles, std::span<const double> rope_bases,
                          const DeltaInputs& delta, void* device, cudaStream_t stream) {
  const BatchInputs layout(uint32_t(tokens.size()), uint32_t(tiles.size()), !rope_bases.empty(),
                           uint32_t(delta.chunks.size()), uint32_t(delta.documents.size()));
  Block& block = blocks_[next_];
  next_ ^= 1;
  // SYNC POINT: the block's previous upload must have read it before the host rewrites it.
  if (block.pending) HSRING_CUDA_CHECK(cudaEventSynchronize(block.copied.get()));
  block.pending = false;
  if (block.memory.size() < layout.bytes)
    block.memory = gpu::PinnedBuffer::allocate(BatchInputs::max_bytes(uint32_t(tokens.size())));
  if (!block.copied) block.copied = gpu::make_event(cudaEventDisableTiming);
  std::byte* host = block.memory.data();
  std::memcpy(host + layout.tokens_at, tokens.data(), tokens.size_bytes());
  std::memcpy(host + layout.positions_at, positions.data(), positions.size_bytes());
  std::memcpy(host + layout.tiles_at, tiles.data(), tiles.size_bytes());
  if (!rope_bases.empty())
    std::memcpy(host + layout.rope_bases_at, rope_bases.data(), rope_bases.size_bytes());
  if (!delta.chunks.empty()) {
    std::memcpy(host + layout.delta_chunks_at, delta.chunks.data(), delta.chunks.size_bytes());
    std::memcpy(host + layout.delta_documents_at, delta.documents.data(),
                delta.documents.size_bytes());
    std::memcpy(host + layout.doc_starts_at, delta.doc_starts.data(),
                delta.doc_starts.size_bytes());
  }
  HSRING_CUDA_CHECK(cudaMemcpyAsync(device, host, layout.bytes, cudaMemcpyHostToDevice, stream));
  HSRING_CUDA_CHECK(cudaEventRecord(block.copied.get(), stream));
  block.pending = true;
}

}  // namespace hsring
