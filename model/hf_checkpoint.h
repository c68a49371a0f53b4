// Loading a Hugging Face model folder: config.json plus either model.safetensors or shards
// listed in model.safetensors.index.json. Tensors are converted to fp32 on load.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/model_weights.h"

namespace hsring {

// Reads `folder`/config.json (see parse_hf_config).
ModelConfig load_hf_checkpoint_config(const std::filesystem::path& folder);

// Loads every tensor `config` needs from `folder` and checks its shape and dtype; tensors
// the model does not use are ignored. A mixture's experts are read per expert
// (mlp.experts.E.{gate,up,down}_proj.weight, as save_pretrained writes them) or, when those
// are absent, from the fused mlp.experts.gate_up_proj / down_proj. Shard names in the index must be
// plain file names inside `folder`. Throws Error naming the tensor and the file: kIo (no weights
// file, a shard cannot be opened), kBadFile (a broken file or index), kMissingTensor, kBadTensor.
ModelWeights load_hf_weights(const std::filesystem::path& folder, const ModelConfig& config);

// One tensor of `folder` as fp32: the first of `names` the checkpoint holds, of `shape`.
// Throws Error(kModel) listing the names when it holds none of them, and the errors
// of load_hf_weights. REQUIRES: !names.empty().
std::vector<float> load_hf_tensor(const std::filesystem::path& folder,
                                  const std::vector<std::string>& names,
                                  const std::vector<int64_t>& shape);

}  // namespace hsring
