// The CUDA kernels that only the target forward has, behind plain host functions (no CUDA
// syntax here, so C++ sources call them; C++17, as nvcc compiles it); the ops it shares with
// the training step (RMSNorm, SwiGLU, RoPE's table, row gathers, bf16 conversion, argmax) are
// the gpu/ops/ library's. Each launches on `stream` and returns the launch's error; none
// synchronises. No kernel uses atomics or a data-dependent reduction order: every output
// element comes from one fixed sequence of operations, so a batch always gives the same bits.
// Matrices are row-major; bf16 values travel as their 16-bit patterns (Bf16).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "model/decoder_layer_shape.h"

namespace hsring {

using Bf16 = uint16_t;

// launch_qkv_finish's kernels (below): the same arithmetic in the same order, so their results
// agree up to how the compiler fuses multiplies and adds; the choice is speed (bench/RESULTS.md):
//   - kStaged: every shape; a warp per head, staged in shared memory where RoPE finds each
//     value's partner.
//   - kInLane: RoPE over the whole head at head_dim 128 or 256 (Qwen3, Llama, Qwen2.5):
//     each value's partner is in its own lane, and nothing is staged.
//   - kBest: kStaged. kInLane has not yet been timed on a GPU against it.
enum class QkvFinishKernel { kBest, kStaged, kInLane };

// Whether `kernel` runs at this layer shape.
bool qkv_finish_kernel_runs(QkvFinishKernel kernel, const DecoderLayerShape& layer);

// Splits an attention layer's fused projection qkv bf16 [rows, (heads (x 2 with the layer's
// attention_gate) + 2 kv_heads) * head_dim] (q | k | v; q as [q_h | gate_h] per head when
// gated) into bf16 q [rows, heads * head_dim], k and v [rows, kv_heads * head_dim]; q and k
// heads get the bias first when qkv_bias [(heads + 2 kv_heads) * head_dim] is given
// (Qwen2), the per-head RMSNorm (the layer's eps) when q_norm / k_norm are given (Qwen3),
// then RoPE with the table's angles [rows, rotary_dim / 2] on the layer's first rotary_dim
// dims, pairing element i with i + rotary_dim / 2 (HF rotate_half); the rest pass through.
// REQUIRES: head_dim <= 256. A kernel that does not run at this shape: cudaErrorNotSupported.
cudaError_t launch_qkv_finish(const Bf16* qkv, uint32_t rows, const DecoderLayerShape& layer,
                              const float* qkv_bias, const float* q_norm, const float* k_norm,
                              const float* cos, const float* sin, Bf16* q, Bf16* k, Bf16* v,
                              cudaStream_t stream, QkvFinishKernel kernel = QkvFinishKernel::kBest);

// Qwen3.5's attention output gate, in place: attn[r, h * head_dim + i] *= sigmoid(gate) with
// gate = qkv[r, (2 h + 1) * head_dim + i] (the gated projection of launch_qkv_finish, row
// stride qkv_stride), in fp32, rounded once to bf16. REQUIRES: head_dim even.
cudaError_t launch_output_gate(const Bf16* qkv, uint64_t qkv_stride, uint32_t rows, uint32_t heads,
                               uint32_t head_dim, Bf16* attn, cudaStream_t stream);

// Writes x fp32 [rows, dim] as `dtype` (rounded to nearest even): element (t, d) goes to
// dst + t * row_pitch_bytes + d * dtype_size(dtype).
cudaError_t launch_capture(const float* x, uint32_t rows, uint32_t dim, DType dtype, void* dst,
                           uint64_t row_pitch_bytes, cudaStream_t stream);

// Weights. dst[i] = bf16 / fp32 of offset + scale * random_uniform(key, i) (model_weights.h):
// the values random_weights draws on the host, bit for bit before the bf16 rounding.
cudaError_t launch_random_fill(Bf16* dst, uint64_t count, uint64_t key, float scale, float offset,
                               cudaStream_t stream);
cudaError_t launch_random_fill(float* dst, uint64_t count, uint64_t key, float scale, float offset,
                               cudaStream_t stream);

// Attention (cuda_attention.cu): flash-style, causal within each document, bf16 tensor-core
// products with fp32 softmax and accumulation. A block of the kernel holds
// kAttentionTileRows query rows: 64 / pack tokens of one document times `pack` query heads
// that share a KV head (GQA packing: the K/V stream is read once for all of them). A tile
// reads the keys of its own document up to its last token, never another document's.
inline constexpr uint32_t kAttentionTileRows = 64;
inline constexpr uint32_t kMaxAttentionPack = 16;
struct AttentionTile {
  int32_t q_begin;    // first token of the tile
  int32_t doc_begin;  // its document's rows: [doc_begin, doc_end)
  int32_t doc_end;
  int32_t unused;
};

// The largest packing the kernel can use, and the one the model uses: a power of two
// dividing heads / kv_heads, at most kMaxAttentionPack (1 for plain multi-head attention).
// Every packing gives the same bits; packing is a speed choice (bench/RESULTS.md).
uint32_t max_attention_pack(uint32_t heads, uint32_t kv_heads);

// The tiles of 64 / pack tokens of a batch with these cu_seqlens (count = documents + 1),
// the longest (most key blocks) first so the long tiles do not trail at the end of the grid.
// At most tokens + documents tiles.
std::vector<AttentionTile> attention_tiles(const int32_t* doc_offsets, size_t count, uint32_t pack);

// Head sizes the attention kernel is built for.
bool attention_supports(uint32_t head_dim);

// The attention kernel's variants. Their results agree up to fp32 rounding, each
// deterministic; the choice is speed (bench/RESULTS.md):
//   - kMmaSync32, kMmaSync64: warp products (mma.sync), 32 or 64 keys a step of the K/V
//     stream; every head dim attention_supports, any GPU. With 32 the kernel's registers and
//     shared memory let 3 blocks share an SM instead of 2.
//   - kWgmma: warpgroup products (model/cuda_attention_wgmma.cu), 64 keys a step; head_dim
//     128 and 256 on an H100 or H200 (sm_90a).
//   - kBest: kWgmma where it runs, else kMmaSync32.
enum class AttentionKernel { kBest, kMmaSync32, kMmaSync64, kWgmma };

// Whether `kernel` runs at this head_dim on the current GPU.
bool attention_kernel_runs(AttentionKernel kernel, uint32_t head_dim);

// out [rows, heads * head_dim] = softmax(q k^T / sqrt(head_dim), causal per document) v for
// every tile; query head h reads KV head h / (heads / kv_heads). q is [rows, heads *
// head_dim], k and v [rows, kv_heads * head_dim], all bf16. REQUIRES:
// attention_supports(head_dim), heads % kv_heads == 0, `pack` a power of two dividing
// heads / kv_heads (at most kMaxAttentionPack), tiles from attention_tiles with the same
// pack, in device memory. A kernel that does not run here: cudaErrorNotSupported.
cudaError_t launch_attention(const Bf16* q, const Bf16* k, const Bf16* v,
                             const AttentionTile* tiles, uint32_t tile_count, uint32_t heads,
                             uint32_t kv_heads, uint32_t head_dim, uint32_t pack, Bf16* out,
                             cudaStream_t stream, AttentionKernel kernel = AttentionKernel::kBest);

}  // namespace hsring
