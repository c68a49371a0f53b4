#include "model/hf_checkpoint.h"

#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include "common/contract.h"
#include "common/error.h"

#include "model/json.h"
#include "model/model_text_file.h"
#include "model/safetensors.h"

namespace hsring {

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// Tensor name -> shard file name, from the index's weight_map.
std::map<std::string, std::string> read_index(const std::filesystem::path& index_path) {
  const std::string source = index_path.string();
  const nlohmann::json index = parse_json(read_model_text_file(index_path), source);
  const auto bad = [&source](const std::string& what) {
    return Error(Errc::kModel, "shard index '" + source + "': " + what);
  };
  const nlohmann::json* map = json_member(index, "weight_map");
  if (!map || !map->is_object()) throw bad("no \"weight_map\" object");
  std::map<std::string, std::string> shards;
  for (const auto& [tensor, file] : map->items()) {
    if (!file.is_string()) throw bad("tensor '" + tensor + "' maps to " + describe_json(file));
    const std::string& name = file.get_ref<const std::string&>();
    // A shard is a file beside the index: no directories, so no escaping the folder.
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
        name.find('\0') != std::string::npos)
      throw bad("tensor '" + tensor + "' maps to '" + name + "', not a file name in the folder");
    shards.emplace(tensor, name);
  }
  return shards;
}

// The tensors of a folder: one model.safetensors or the shards its index names, each shard
// opened once, on first use.
class CheckpointTensors {
 public:
  explicit CheckpointTensors(std::filesystem::path folder) : folder_(std::move(folder)) {
    std::error_code ec;
    index_path_ = folder_ / kIndexFile;
    sharded_ = std::filesystem::exists(index_path_, ec);
    if (!sharded_ && !std::filesystem::exists(folder_ / kSingleFile, ec))
      throw Error(Errc::kModel, "no " + std::string(kSingleFile) + " or " + kIndexFile + " in '" +
                                    folder_.string() + "'");
    if (sharded_) shard_of_ = read_index(index_path_);
  }

  // The file holding tensor `name`, or nullptr when no file does.
  const SafetensorsFile* find(const std::string& name) {
    if (!sharded_) {
      const SafetensorsFile& single = file(kSingleFile);
      return single.find(name) ? &single : nullptr;
    }
    const auto it = shard_of_.find(name);
    return it == shard_of_.end() ? nullptr : &file(it->second);
  }

  // Checks that tensor `name` is there with shape `shape`, reading nothing. Throws
  // Error(kModel) naming the index or the file when it is in none,
  // Error(kModel) when its shape is not `shape`.
  void check(const std::string& name, const std::vector<int64_t>& shape) {
    holder_of(name).check_tensor(name, shape);
  }

  // Reads tensor `name` as fp32, refusing a non-finite value (SafetensorsFile::read_weights).
  // Throws as check(), and Error(kModel) naming the first NaN or infinity.
  void read(const std::string& name, const std::vector<int64_t>& shape, std::vector<float>& out) {
    holder_of(name).read_weights(name, shape, out);
  }

  // Every tensor name the folder holds.
  std::vector<std::string> names() {
    std::vector<std::string> out;
    if (sharded_) {
      for (const auto& [name, shard] : shard_of_) out.push_back(name);
    } else {
      for (const TensorInfo& t : file(kSingleFile).tensors()) out.push_back(t.name);
    }
    return out;
  }

 private:
  const SafetensorsFile& file(const std::string& name) {
    std::unique_ptr<SafetensorsFile>& slot = files_[name];
    if (!slot) slot = SafetensorsFile::open(folder_ / name);
    return *slot;
  }

  // The file to ask for `name`: its shard, or the single file (which names a missing
  // tensor itself).
  const SafetensorsFile& holder_of(const std::string& name) {
    const SafetensorsFile* holder = find(name);
    if (!holder && sharded_)
      throw Error(Errc::kModel, "tensor '" + name + "' is missing: '" + index_path_.string() +
                                    "' names no shard for it");
    return holder ? *holder : file(kSingleFile);
  }

  std::filesystem::path folder_;
  std::filesystem::path index_path_;
  bool sharded_ = false;
  std::map<std::string, std::string> shard_of_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
};

// A mixture's experts stored fused, as transformers 5 holds them in memory
// (mlp.experts.gate_up_proj [E, 2I, H]: gate rows then up rows; mlp.experts.down_proj
// [E, H, I]), for checkpoints written that way instead of per expert.
void read_fused_experts(CheckpointTensors& tensors, const std::string& mlp, const MoeShape& m,
                        int64_t hidden, MoeWeights& out) {
  const int64_t e = m.num_experts, width = m.expert_intermediate;
  std::vector<float> gate_up(size_t(e * 2 * width * hidden)), down(size_t(e * hidden * width));
  tensors.read(mlp + "experts.gate_up_proj", {e, 2 * width, hidden}, gate_up);
  tensors.read(mlp + "experts.down_proj", {e, hidden, width}, down);
  const size_t block = size_t(width * hidden);
  for (size_t x = 0; x < size_t(e); ++x) {
    const auto from = gate_up.begin() + std::ptrdiff_t(2 * x * block);
    out.experts[x].gate_proj.assign(from, from + std::ptrdiff_t(block));
    out.experts[x].up_proj.assign(from + std::ptrdiff_t(block), from + std::ptrdiff_t(2 * block));
    const auto d = down.begin() + std::ptrdiff_t(x * block);
    out.experts[x].down_proj.assign(d, d + std::ptrdiff_t(block));
  }
}

// "model.layers.N.mlp." of the expert tensor `name` ("...mlp.experts.E.gate_proj.weight"),
// or "" when `name` is no expert tensor.
std::string expert_mlp_prefix(const std::string& name) {
  const size_t at = name.find("mlp.experts.");
  return at == std::string::npos ? "" : name.substr(0, at + 4);
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
              fmt::format("'{}': config.json (model_type '{}') does not use {} tensor(s) of its "
                          "layers, '{}' first: the weights are of another architecture (q_norm / "
                          "k_norm: qwen3; q_proj.bias: qwen2). Correct model_type in config.json",
                          folder.string(), config.model_type, unused, first));
}

}  // namespace

ModelConfig load_hf_checkpoint_config(const std::filesystem::path& folder) {
  return load_hf_config(folder / "config.json");
}

ModelWeights load_hf_weights(const std::filesystem::path& folder, const ModelConfig& config) {
  if (std::string why = validate_config(config); !why.empty())
    throw Error(Errc::kModelBadConfig, "cannot load weights for an invalid config: " + why);
  CheckpointTensors tensors(folder);
  // Mixtures whose checkpoint has the fused experts and not the per-expert tensors: their
  // per-expert names are not looked for below.
  std::set<std::string> fused;
  for (uint32_t i = 0; i < config.num_layers; ++i) {
    const std::string mlp = fmt::format("{}layers.{}.mlp.", config.weight_prefix, i);
    if (config.mlp_kind(i) == MlpKind::kExperts &&
        !tensors.find(mlp + "experts.0.up_proj.weight") &&
        tensors.find(mlp + "experts.gate_up_proj"))
      fused.insert(mlp);
  }
  // Every tensor is found with its shape before any is allocated: a config.json whose sizes
  // the files do not hold is refused here, not by std::bad_alloc.
  std::set<std::string> used;
  for (const WeightSpec& t : weight_specs(config)) {
    if (!fused.empty() && fused.count(expert_mlp_prefix(t.name))) continue;
    tensors.check(t.name, t.shape);
    used.insert(t.name);
  }
  const int64_t e = config.moe.num_experts, width = config.moe.expert_intermediate,
                hidden = config.hidden_size;
  for (const std::string& mlp : fused) {
    tensors.check(mlp + "experts.gate_up_proj", {e, 2 * width, hidden});
    tensors.check(mlp + "experts.down_proj", {e, hidden, width});
    used.insert({mlp + "experts.gate_up_proj", mlp + "experts.down_proj"});
  }
  refuse_unused_layer_tensors(config, tensors.names(), used, folder);

  ModelWeights weights;
  const std::vector<WeightTensor> list = weight_tensors(config, weights);
  for (uint32_t i = 0; i < config.num_layers; ++i) {
    const std::string mlp = fmt::format("{}layers.{}.mlp.", config.weight_prefix, i);
    if (fused.count(mlp))
      read_fused_experts(tensors, mlp, config.moe, config.hidden_size, weights.layers[i].moe);
  }
  for (const WeightTensor& t : list) {
    if (!fused.empty() && fused.count(expert_mlp_prefix(t.name))) continue;
    tensors.read(t.name, t.shape, *t.data);
    // Qwen3.5's norms apply 1 + w: the forward's multiplier, computed once here in fp32 as
    // transformers does.
    if (stored_zero_centred(config, t.name))
      for (float& v : *t.data) v = 1.0f + v;
  }
  return weights;
}

std::vector<float> load_hf_tensor(const std::filesystem::path& folder,
                                  const std::vector<std::string>& names,
                                  const std::vector<int64_t>& shape) {
  HSRING_REQUIRE(!names.empty());
  CheckpointTensors tensors(folder);
  std::vector<float> out(
      size_t(std::accumulate(shape.begin(), shape.end(), int64_t(1), std::multiplies<int64_t>())));
  for (const std::string& name : names) {
    if (!tensors.find(name)) continue;
    tensors.read(name, shape, out);
    return out;
  }
  std::string listed;
  for (const std::string& name : names) listed += (listed.empty() ? "'" : ", '") + name + "'";
  throw Error(Errc::kModel, "none of the tensors " + listed + " is in '" + folder.string() + "'");
}

}  // namespace hsring
