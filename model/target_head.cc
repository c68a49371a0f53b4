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

TargetHead random_target_head(const ModelConfig& config, uint64_t seed) {
  TargetHead head;
  head.config = config;
  // A preset's embedding sits under its weight root (model.language_model. for the
  // Qwen3.5 / 3.6 hybrid), as random_weights names it.
  for (const WeightSpec& w : weight_specs(config)) {
    if (w.name == config.weight_prefix + "embed_tokens.weight") head.embed = random_tensor(w, seed);
    if (w.name == "lm_head.weight") head.lm_head = random_tensor(w, seed);
  }
  return head;
}

TargetHead load_target_head(const std::string& spec, uint64_t seed) {
  TargetHead head;
  head.config = model_outline_of(spec);
  std::error_code ec;
  if (std::filesystem::is_directory(spec, ec)) {
    // The two tensors alone: a 30B mixture's experts are never read. An outline's
    // embedding may sit under another prefix than its config suggests (a wrapper saved by
    // transformers 4 or 5): the known places are tried in turn.
    const ModelConfig& c = head.config;
    const std::vector<int64_t> shape = {c.vocab_size, c.hidden_size};
    std::vector<std::string> embed = {c.weight_prefix + "embed_tokens.weight"};
    for (const char* prefix : {"model.", "model.language_model.", "language_model.model."})
      if (prefix != c.weight_prefix) embed.push_back(std::string(prefix) + "embed_tokens.weight");
    head.embed = load_hf_tensor(spec, embed, shape);
    if (!c.tie_embeddings) head.lm_head = load_hf_tensor(spec, {"lm_head.weight"}, shape);
    return head;
  }
  return random_target_head(head.config, seed);
  return head;
}

}  // namespace hsring
