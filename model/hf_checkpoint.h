// Loading a Hugging Face model folder: config.json plus either model.safetensors or shards
// listed in model.safetensors.index.json. Tensors are converted to fp32 on load.
#pragma once

#include <filesystem>

#include "model/model_config.h"
#include "model/model_weights.h"

namespace hsring {

// Reads `folder`/config.json (see parse_hf_config).
ModelConfig load_hf_checkpoint_config(const std::filesystem::path& folder);

// Loads every tensor `config` needs from `folder` and checks its shape and dtype; tensors
// the model does not use are ignored. Shard names in the index must be plain file names
// inside `folder`. Throws Error naming the tensor and the file: kIo (no weights file,
// a shard cannot be opened), kBadFile (a broken file or index), kMissingTensor, kBadTensor.
ModelWeights load_hf_weights(const std::filesystem::path& folder, const ModelConfig& config);

}  // namespace hsring
