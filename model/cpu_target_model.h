// The fp32 CPU reference of the target: a Llama / Qwen2 / Qwen3 / Qwen3.5 (hybrid) decoder,
// dense or mixture-of-experts, over packed documents.
// Correctness first (it is what a CUDA forward is checked against), threads over rows and
// output columns so a tiny model serves a CPU-only pipeline.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/cpu_moe.h"
#include "model/decoder_layer.h"
#include "model/model_config.h"
#include "model/model_weights.h"
#include "model/target_model.h"

namespace hsring {

struct CpuModelOptions {
  uint32_t threads = 0;  // 0: every hardware thread
};

class CpuTargetModel final : public TargetModel {
 public:
  // Throws Error(kModelBadConfig) when the config is invalid or the weights do not fit it.
  CpuTargetModel(ModelConfig config, ModelWeights weights, CpuModelOptions options = {});

  const ModelConfig& config() const override { return config_; }
  const ModelWeights& weights() const { return weights_; }
  void forward(const PackedBatch& batch, const ForwardRequest& request,
               ForwardOutput& out) override;

 private:
  // Runs decoder layer `index` on residual_ [T, H] in place (through mid_).
  void run_layer(uint32_t index, const PackedBatch& batch);
  // The DeltaNet token mixer: normed_ [T, H] in, mixed_ [T, H] out.
  void run_delta_net(const LayerWeights& w, const PackedBatch& batch);
  // Final norm, LM head in chunks of rows (no [T, V] buffer unless logits are requested).
  void run_head(size_t rows, const ForwardRequest& request, ForwardOutput& out);

  ModelConfig config_;
  ModelWeights weights_;
  uint32_t threads_;
  // Scratch, sized on demand and kept between forwards.
  std::vector<float> residual_, mid_, normed_, mixed_, rope_cos_, rope_sin_;
  AttentionBlockActivations<float> attention_;                         // of the attention layers
  MlpBlockActivations<float> dense_mlp_;                               // of the dense MLPs
  MlpScratch mlp_;                                                     // of the mixtures of experts
  std::vector<float> dn_qkv_, dn_conv_, dn_z_, dn_a_, dn_b_, dn_out_;  // DeltaNet layers
};

// A CPU model from `spec`: a preset name ("tiny", "qwen3-8b", ...) with random weights
// drawn from `seed`, or a path to a Hugging Face model folder (config.json +
// safetensors). Throws Error.
std::unique_ptr<CpuTargetModel> open_cpu_model(const std::string& spec, uint64_t seed = 0,
                                               CpuModelOptions options = {});

}  // namespace hsring
