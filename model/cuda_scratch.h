// The memory one CUDA forward works in: activation buffers sized for a token count, and
// the pinned staging through which a batch's host arrays reach the GPU without making the
// host wait for the copy.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "gpu/cuda_handles.h"
#include "model/cuda_delta_net.h"
#include "model/cuda_kernels.h"
#include "model/model_config.h"

namespace hsring {

// Activations of a forward over up to `capacity` tokens. Dtypes: the residual stream and the
// q/k/v projection (before QK-norm and RoPE) are fp32; GEMM inputs are bf16.
struct ForwardActivations {
  uint32_t capacity = 0;
  gpu::DeviceBuffer residual;            // fp32 [T, H]
  gpu::DeviceBuffer normed;              // bf16 [T, H]: RMSNorm output, a GEMM input
  gpu::DeviceBuffer qkv;                 // bf16 [T, q (x 2 with an output gate) + 2 kv]
  gpu::DeviceBuffer q, k, v;             // bf16 [T, q], [T, kv], [T, kv]
  gpu::DeviceBuffer attn;                // bf16 [T, q]
  gpu::DeviceBuffer gate_up;             // bf16 [T, 2 I]
  gpu::DeviceBuffer act;                 // bf16 [T, I]
  gpu::DeviceBuffer rope_cos, rope_sin;  // fp32 [T, rope_dim / 2]
  gpu::DeviceBuffer inputs;              // the staged inputs (BatchInputs layout)
  // DeltaNet layers (hybrid models only, else empty); C = conv_dim, V = v_dim.
  gpu::DeviceBuffer delta_proj;     // bf16 [T, C + V + 2 v_heads]: qkv | z | b | a
  gpu::DeviceBuffer delta_qkv;      // bf16 [T, C]: after the convolution and q/k norms
  gpu::DeviceBuffer delta_g;        // fp32 [T, v_heads]
  gpu::DeviceBuffer delta_beta;     // fp32 [T, v_heads]
  gpu::DeviceBuffer delta_scratch;  // fp32, delta_scratch_floats
  gpu::DeviceBuffer delta_out;      // bf16 [T, V]: the delta rule's output
  gpu::DeviceBuffer delta_normed;   // bf16 [T, V]: after the gated norm, a GEMM input
  // Mixture-of-experts layers (else empty); S = T * top_k slots, E experts, I_e and I_s the
  // experts' and the shared expert's widths (model/cuda_moe.h).
  gpu::DeviceBuffer normed_lo;       // bf16 [T, H]: what normed leaves of the fp32 norm
  gpu::DeviceBuffer router_logits;   // fp32 [T, router_rows(config)]
  gpu::DeviceBuffer expert_choices;  // ExpertChoice [S]
  gpu::DeviceBuffer chunk_counts;    // int32 [group_chunks(S), E]
  gpu::DeviceBuffer expert_begin;    // int32 [E + 1]
  gpu::DeviceBuffer slot_row;        // int32 [S]
  gpu::DeviceBuffer row_token;       // int32 [S]
  gpu::DeviceBuffer expert_tiles;    // ExpertTile [max_expert_tiles(S, E)]
  gpu::DeviceBuffer expert_gate_up;  // bf16 [S, 2 I_e], grouped order
  gpu::DeviceBuffer expert_act;      // bf16 [S, I_e]
  gpu::DeviceBuffer expert_out;      // fp32 [S, H]
  gpu::DeviceBuffer shared_gate_up;  // bf16 [T, 2 I_s]
  gpu::DeviceBuffer shared_act;      // bf16 [T, I_s]
  gpu::DeviceBuffer shared_out;      // fp32 [T, H]

  // Reallocates every buffer for `tokens` tokens when it holds fewer. Throws Error(kCuda);
  // out of memory names the model, the bytes and the GPU. REQUIRES: no forward is using the
  // buffers (the caller synchronised their stream).
  void grow(const ModelConfig& config, uint32_t tokens, int gpu);
};

// Where a batch's inputs lie in one staged block: tokens, positions, the attention tiles
// (16-byte aligned), one double per token for dynamic NTK RoPE (its document's base;
// empty for the other RoPE rules), then for hybrid models the delta rule's chunks and
// documents (DeltaSpan) and each token's document start (int32). Host and device
// copies share the layout.
struct BatchInputs {
  // For any batch of up to `tokens` tokens, with or without the RoPE bases and spans.
  static uint64_t max_bytes(uint32_t tokens);
  BatchInputs(uint32_t tokens, uint32_t tiles, bool rope_bases, uint32_t delta_chunks = 0,
              uint32_t delta_documents = 0);
  uint64_t tokens_at = 0, positions_at = 0, tiles_at = 0, rope_bases_at = 0;
  uint64_t delta_chunks_at = 0, delta_documents_at = 0, doc_starts_at = 0, bytes = 0;
  uint32_t tile_count = 0, delta_chunk_count = 0, delta_document_count = 0;
};

// What a hybrid model's forward stages besides tokens and positions (empty otherwise).
struct DeltaInputs {
  std::span<const DeltaSpan> chunks, documents;
  std::span<const int32_t> doc_starts;  // one per token when chunks is not empty
};

// Two pinned staging blocks used in turn. A block is rewritten only after the copy that
// last read it has completed (its event), so the host never overwrites bytes in flight
// and waits, at most, for the copy of the forward two calls back.
class InputStaging {
 public:
  // Copies tokens, positions, tiles, rope_bases (empty, or one per token) and the delta
  // rule's inputs into the next
  // pinned block and enqueues its upload into `device` (BatchInputs layout) on `stream`.
  // Throws Error(kCuda).
  void upload(std::span<const int32_t> tokens, std::span<const int32_t> positions,
              std::span<const AttentionTile> tiles, std::span<const double> rope_bases,
              const DeltaInputs& delta, void* device, cudaStream_t stream);

 private:
  struct Block {
    gpu::PinnedBuffer memory;
    gpu::Event copied;  // recorded after the upload that read `memory`
    bool pending = false;
  };
  Block blocks_[2];
  uint32_t next_ = 0;
};

}  // namespace hsring
