#include "model/target_head.h"

#include <filesystem>

#include "model/hf_checkpoint.h"
#include "model/model_weights.h"
#include "model/target_model.h"

namespace hsring {

namespace {

std::vector<float> random_tensor(const WeightSpec& spec, uint64_t seed) {
  size_t size = 1;
  for (int64_t d : spec.shape) size *= size_t(d);
  const RandomFill fill = random_fill(spec, seed);
  std::vector<float> data(size);
  for (size_t i = 0; i < size; ++i)
    data[i] = fill.offset + fill.scale * random_uniform(fill.key, i);
  return data;
}

}  // namespace

TargetHead load_target_head(const std::string& spec, uint64_t seed) {
  TargetHead head;
  head.config = model_config_of(spec);
  std::error_code ec;
  if (std::filesystem::is_directory(spec, ec)) {
    // A folder's safetensors are read whole; the tensors the head does not need are dropped.
    ModelWeights weights = load_hf_weights(spec, head.config);
    head.embed = std::move(weights.embed_tokens);
    head.lm_head = std::move(weights.lm_head);
    return head;
  }
  for (const WeightSpec& w : weight_specs(head.config)) {
    if (w.name == "model.embed_tokens.weight") head.embed = random_tensor(w, seed);
    if (w.name == "lm_head.weight") head.lm_head = random_tensor(w, seed);
  }
  return head;
}

}  // namespace hsring
