// What a target model computes for one packed batch, independent of where it runs: the
// CPU reference (cpu_target_model.h) implements it now, a CUDA forward later.
//
// Capture convention: layer id i (0-based) is the output of decoder layer i, the residual
// stream after its MLP, before the final norm. HF's output_hidden_states[i + 1] equals it
// for i < L - 1 (HF applies the final norm to its last entry; we never do).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace hsring {

// Documents packed back to back; views, not owned.
struct PackedBatch {
  std::span<const int32_t> tokens;       // [T], each in [0, vocab)
  std::span<const int32_t> positions;    // [T], RoPE positions (normally 0.. in each document)
  std::span<const int32_t> doc_offsets;  // [D + 1], cu_seqlens: 0 = o_0 < o_1 < ... < o_D = T
};

struct ForwardRequest {
  std::vector<int32_t> capture_layers;  // layer ids to return, in this order
  bool logits = false;                  // return [T, V] logits (large: T * V floats)
  bool greedy = true;                   // return the argmax token of each position's logits
};

// Reused across forwards so steady-state forwards do not allocate.
struct ForwardOutput {
  uint32_t token_count = 0;
  uint32_t hidden_size = 0;
  std::vector<std::vector<float>> captured;  // [K][T * H], one per requested layer
  std::vector<float> logits;                 // [T * V] when requested, else empty
  std::vector<int32_t> greedy;               // [T] when requested, else empty
};

// Throws Error(kModel) naming the first problem: mismatched lengths, an empty
// batch, bad document offsets, a token outside the vocabulary, a negative position.
void validate_batch(const PackedBatch& batch, const ModelConfig& config);
// Throws Error(kModel) when a layer id is outside [0, num_layers).
void validate_request(const ForwardRequest& request, const ModelConfig& config);

// The config of model `spec`: a preset name ("tiny", "qwen3-8b", ...) or a Hugging Face
// model folder (its config.json; the weights are not read). Throws Error naming the
// spec: an unknown preset (listing the known ones), a missing folder, a bad config.
ModelConfig model_config_of(const std::string& spec);

// What a drafter needs of model `spec`, whatever its architecture: model_config_of when
// hsring's own forward runs it, else the folder's outline (parse_hf_outline), whose
// no_native_forward says why that forward refused it. For processes that never run the
// target themselves: drafters, and a launcher whose targets are user commands.
ModelConfig model_outline_of(const std::string& spec);

// Thread safety: a model runs one forward at a time (it owns its scratch memory).
class TargetModel {
 public:
  virtual ~TargetModel() = default;
  virtual const ModelConfig& config() const = 0;
  // Runs the forward over `batch` and fills `out` (fp32, on the host). A pure function of
  // the weights and the batch: the same batch always gives the same bits, so a batch
  // produced again after a crash is identical. Throws Error(kModel) on bad input.
  virtual void forward(const PackedBatch& batch, const ForwardRequest& request,
                       ForwardOutput& out) = 0;
};

}  // namespace hsring
