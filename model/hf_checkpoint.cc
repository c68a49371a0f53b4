#include "model/hf_checkpoint.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "model/json.h"
#include "model/safetensors.h"
#include "model/text_file.h"

namespace hsring {

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// Tensor name -> shard file name, from the index's weight_map.
std::map<std::string, std::string> read_index(const std::filesystem::path& index_path) {
  const std::string source = index_path.string();
  const JsonValue index = parse_json(read_text_file(index_path), source);
  const auto bad = [&source](const std::string& what) {
    return Error(Errc::kModelBadFile, "shard index '" + source + "': " + what);
  };
  const JsonValue* map = index.find("weight_map");
  if (!map || !map->is_object()) throw bad("no \"weight_map\" object");
  std::map<std::string, std::string> shards;
  for (const auto& [tensor, file] : map->as_object()) {
    if (!file.is_string()) throw bad("tensor '" + tensor + "' maps to " + describe_json(file));
    const std::string& name = file.as_string();
    // A shard is a file beside the index: no directories, so no escaping the folder.
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
        name.find('\0') != std::string::npos)
      throw bad("tensor '" + tensor + "' maps to '" + name + "', not a file name in the folder");
    shards.emplace(tensor, name);
  }
  return shards;
}

// Opens each shard once, on first use.
class ShardSet {
 public:
  explicit ShardSet(std::filesystem::path folder) : folder_(std::move(folder)) {}

  const SafetensorsFile& get(const std::string& file) {
    std::unique_ptr<SafetensorsFile>& slot = files_[file];
    if (!slot) slot = SafetensorsFile::open(folder_ / file);
    return *slot;
  }

 private:
  std::filesystem::path folder_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
};

std::vector<std::string> tensor_names(const std::map<std::string, std::string>& shard_of) {
  std::vector<std::string> names;
  for (const auto& [name, file] : shard_of) names.push_back(name);
  return names;
}

std::vector<std::string> tensor_names(const SafetensorsFile& file) {
  std::vector<std::string> names;
  for (const TensorInfo& t : file.tensors()) names.push_back(t.name);
  return names;
}

bool ends_with(const std::string& text, std::string_view suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A tensor of the decoder layers that the config does not use means the config describes
// another architecture: model_type "llama" over Qwen3 weights leaves every q_norm / k_norm
// unread, and the forward silently differs from the model's. Other unused tensors (a tied
// lm_head, a vision tower, MTP heads) are the model's business and stay allowed.
void refuse_unused_layer_tensors(const ModelConfig& config, const std::vector<std::string>& names,
                                 const std::set<std::string>& used,
                                 const std::filesystem::path& folder) {
  const std::string layers = config.weight_prefix + "layers.";
  size_t unused = 0;
  std::string first;
  for (const std::string& name : names) {
    if (name.rfind(layers, 0) != 0 || used.count(name)) continue;
    // Older transformers saved RoPE's inverse frequencies; it recomputes and ignores them.
    if (ends_with(name, "rotary_emb.inv_freq")) continue;
    if (unused++ == 0) first = name;
  }
  if (unused == 0) return;
  throw Error(Errc::kModelBadConfig,
              "'" + folder.string() + "': config.json (model_type '" + config.model_type +
                  "') does not use " + std::to_string(unused) + " tensor(s) of its layers, '" +
                  first +
                  "' first: the weights are of another architecture (q_norm / k_norm: qwen3; "
                  "q_proj.bias: qwen2). Correct model_type in config.json");
}

}  // namespace

ModelConfig load_hf_checkpoint_config(const std::filesystem::path& folder) {
  return load_hf_config(folder / "config.json");
}

ModelWeights load_hf_weights(const std::filesystem::path& folder, const ModelConfig& config) {
  if (std::string why = validate_config(config); !why.empty())
    throw Error(Errc::kModelBadConfig, "cannot load weights for an invalid config: " + why);
  std::error_code ec;
  const std::filesystem::path index_path = folder / kIndexFile;
  const bool sharded = std::filesystem::exists(index_path, ec);
  if (!sharded && !std::filesystem::exists(folder / kSingleFile, ec))
    throw Error(Errc::kModelIo, "no " + std::string(kSingleFile) + " or " + kIndexFile + " in '" +
                                    folder.string() + "'");
  std::map<std::string, std::string> shard_of;
  if (sharded) shard_of = read_index(index_path);

  const auto file_of = [&](const std::string& tensor) -> std::string {
    if (!sharded) return kSingleFile;
    const auto it = shard_of.find(tensor);
    if (it == shard_of.end())
      throw Error(Errc::kModelMissingTensor, "tensor '" + tensor + "' is missing: '" +
                                                 index_path.string() + "' names no shard for it");
    return it->second;
  };
  ShardSet shards(folder);
  // Every tensor is found with its shape before any is allocated: a config.json whose sizes
  // the files do not hold is refused here, not by std::bad_alloc.
  std::set<std::string> used;
  for (const WeightSpec& t : weight_specs(config)) {
    shards.get(file_of(t.name)).check_tensor(t.name, t.shape);
    used.insert(t.name);
  }
  refuse_unused_layer_tensors(
      config, sharded ? tensor_names(shard_of) : tensor_names(shards.get(kSingleFile)), used,
      folder);
  ModelWeights weights;
  for (const WeightTensor& t : weight_tensors(config, weights)) {
    shards.get(file_of(t.name)).read_weights(t.name, t.shape, *t.data);
    // Qwen3.5's norms apply 1 + w: the forward's multiplier, computed once here in fp32 as
    // transformers does.
    if (stored_zero_centred(config, t.name))
      for (float& v : *t.data) v = 1.0f + v;
  }
  return weights;
}

}  // namespace hsring
