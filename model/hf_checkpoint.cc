#include "model/hf_checkpoint.h"

#include <map>
#include <memory>
#include <string>

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

  ShardSet shards(folder);
  ModelWeights weights;
  for (const WeightTensor& t : weight_tensors(config, weights)) {
    std::string file = kSingleFile;
    if (sharded) {
      const auto it = shard_of.find(t.name);
      if (it == shard_of.end())
        throw Error(Errc::kModelMissingTensor, "tensor '" + t.name + "' is missing: '" +
                                                   index_path.string() + "' names no shard for it");
      file = it->second;
    }
    shards.get(file).read_as_float(t.name, t.shape, *t.data);
    // Qwen3.5's norms apply 1 + w: the forward's multiplier, computed once here in fp32 as
    // transformers does.
    if (stored_zero_centred(config, t.name))
      for (float& v : *t.data) v = 1.0f + v;
  }
  return weights;
}

}  // namespace hsring
