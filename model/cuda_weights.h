// The target's weights on one GPU, in one allocation: bf16 matrices, fp32 norm, bias and
// gate vectors (tiny, and near 1 where bf16 would keep only 8 bits). q/k/v projections are stacked
// into one [q + 2 kv, H] matrix and gate/up into one [2 I, H] matrix, so each pair is one GEMM;
// a mixture's experts lie one after the other, so one grouped GEMM reads any of them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/cuda_handles.h"
#include "model/cuda_kernels.h"
#include "model/model_config.h"
#include "model/model_weights.h"

namespace hsring {

// One decoder layer. An attention layer has qkv, o and the attention vectors; a Qwen3.5
// DeltaNet layer the delta_* fields instead (the others null). With an output gate
// (Qwen3.5), q_proj has 2 heads * head_dim rows, [q | gate] per head.
struct DeviceLayerWeights {
  Bf16* qkv = nullptr;          // [(heads (x 2) + 2 kv_heads) * head_dim, H]: q, k, v_proj
  Bf16* o = nullptr;            // [H, heads * head_dim]
  Bf16* gate_up = nullptr;      // [2 I, H]: gate_proj, then up_proj
  Bf16* down = nullptr;         // [H, I]
  float* input_norm = nullptr;  // [H]
  float* post_norm = nullptr;   // [H]
  float* q_norm = nullptr;      // [head_dim]; null without QK-norm
  float* k_norm = nullptr;      // [head_dim]; null without QK-norm
  float* qkv_bias = nullptr;    // [(heads + 2 kv_heads) * head_dim]; Qwen2 only, else null
  // DeltaNet: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a stacked [C + V + 2 v_heads, H]
  // (one GEMM), the depthwise convolution, the output projection, and the fp32 vectors.
  Bf16* delta_in = nullptr;        // [C + V + 2 v_heads, H]
  Bf16* delta_conv = nullptr;      // [C, kernel]
  Bf16* delta_out = nullptr;       // [H, V]
  float* delta_dt_bias = nullptr;  // [v_heads]
  float* delta_a_log = nullptr;    // [v_heads]
  float* delta_norm = nullptr;     // [v_head_dim]
  // A mixture-of-experts MLP (gate_up and down null then): the router, with Qwen3.5's
  // shared-expert gate as one more row (one fp32-exact product gives both), every expert's
  // stacked gate/up and down, one after the other, and the shared expert (null without one).
  Bf16* router = nullptr;           // [router_rows, H]: mlp.gate, shared_expert_gate
  Bf16* experts_gate_up = nullptr;  // [E, 2 I_e, H]
  Bf16* experts_down = nullptr;     // [E, H, I_e]
  Bf16* shared_gate_up = nullptr;   // [2 I_s, H]
  Bf16* shared_down = nullptr;      // [H, I_s]
};

// Rows of a mixture's router matrix on the GPU: the experts, Qwen3.5's shared-expert gate,
// then zero rows up to a multiple of 8 (cuBLAS ran the 257 rows of qwen3.6-35b-a3b at a
// quarter of the rate of 128, bench/RESULTS.md); also the row stride of its logits.
uint32_t router_rows(const ModelConfig& config);

class DeviceWeights {
 public:
  DeviceWeights() = default;
  // Room for every tensor of `config` on the current device (GPU `gpu`), contents undefined.
  // Throws Error(kCuda); out of memory is a message naming the model, the bytes it needs
  // and the GPU with its free memory.
  static DeviceWeights allocate(const ModelConfig& config, int gpu);

  // Copies fp32 host weights, rounded to bf16 (nearest even) for the matrices, on `stream`,
  // and waits for it. REQUIRES: check_weights(config, host).empty().
  void upload(const ModelConfig& config, const ModelWeights& host, cudaStream_t stream);
  // Draws random_weights(config, seed) on the GPU: the same fp32 values, then bf16.
  void randomize(const ModelConfig& config, uint64_t seed, cudaStream_t stream);
  // The weights as the forward uses them, widened to fp32 (tests).
  ModelWeights download(const ModelConfig& config) const;

  const DeviceLayerWeights& layer(uint32_t i) const { return layers_[i]; }
  const Bf16* embed() const { return embed_; }
  const Bf16* lm_head() const { return lm_head_; }  // embed() when tied
  const float* final_norm() const { return final_norm_; }
  uint64_t bytes() const { return bytes_; }

 private:
  struct Place {
    void* data = nullptr;
    bool fp32 = false;  // norm vector (fp32) or matrix (bf16)
  };
  // Where the tensor with this HF name lives. Throws Error(kModelBadConfig) for a name the
  // layout does not know (a model_weights.cc change not followed here).
  Place place(const std::string& name) const;
  // The same for a field of a mixture-of-experts layer ("mlp.experts.3.up_proj.weight"),
  // {} when `field` is none of the mixture's.
  Place expert_place(const DeviceLayerWeights& layer, const std::string& field) const;

  gpu::UniqueCuda<void*, gpu::DeviceMemory::free> memory_;
  uint64_t bytes_ = 0;
  Bf16* embed_ = nullptr;
  Bf16* lm_head_ = nullptr;
  float* final_norm_ = nullptr;
  std::vector<DeviceLayerWeights> layers_;
  std::string prefix_;  // where the text model's tensors live ("model.", ...)
  uint32_t q_rows_ = 0, kv_rows_ = 0, inter_ = 0, hidden_ = 0;
  uint32_t conv_dim_ = 0, delta_v_dim_ = 0, delta_v_heads_ = 0;
  uint32_t experts_ = 0, expert_inter_ = 0, shared_inter_ = 0;
};

}  // namespace hsring
