#include "checkpoint/dflash_export.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/checkpoint_files.h"
#include "checkpoint/dflash_modeling.h"
#include "checkpoint/safetensors_export.h"
#include "common/error.h"
#include "common/exclusive_file.h"
#include "common/regular_file.h"
#include "common/syscheck.h"
#include "model/json.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "train/dflash_params.h"

namespace hsring::checkpoint {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using train::DflashConfig;
using train::ParamLayout;

// An export's config.json is a few kilobytes; a larger one is not an export's.
constexpr size_t kMaxConfigBytes = 1u << 20;

[[noreturn]] void bad_export(const std::string& dir, const std::string& what) {
  throw Error(Errc::kCheckpoint, dir, what);
}

bool same_layout(const ParamLayout& a, const ParamLayout& b) {
  if (a.total != b.total || a.tensors.size() != b.tensors.size()) return false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const auto &x = a.tensors[i], &y = b.tensors[i];
    if (x.name != y.name || x.shape != y.shape || x.offset != y.offset) return false;
  }
  return true;
}

json config_json(const DflashConfig& c, std::span<const int32_t> layer_ids,
                 const DflashExportOptions& options) {
  json j;
  j["architectures"] = {kDflashArchitecture};
  j["model_type"] = "qwen3";
  j["hidden_size"] = c.target_hidden;
  j["vocab_size"] = c.vocab_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_target_layers"] = options.num_target_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["intermediate_size"] = c.intermediate_size;
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}};
  j["max_position_embeddings"] = options.max_position_embeddings;
  j["block_size"] = c.block_size;
  j["is_causal"] = false;
  j["use_sliding_window"] = false;
  j["layer_types"] = std::vector<std::string>(c.num_layers, "full_attention");
  j["tie_word_embeddings"] = false;
  j["dflash_config"] = {
      {"target_layer_ids", std::vector<int32_t>(layer_ids.begin(), layer_ids.end())},
      {"mask_token_id", c.mask_token_id},
      {"block_size", c.block_size}};
  // SGLang versions that shipped DFlash resolve the mask by this text, defaulting to
  // "<|MASK|>" when absent; the id alone is read by newer SGLang, vLLM and transformers.
  if (!options.mask_token.empty()) j["dflash_config"]["mask_token"] = options.mask_token;
  // AutoModel.from_pretrained(dir, trust_remote_code=True) imports this class from the
  // folder's own file; the config class stays transformers' Qwen3Config (model_type).
  j["auto_map"] = {{"AutoModel", kDflashAutoModel}};
  j["torch_dtype"] = "bfloat16";
  j["dtype"] = "bfloat16";  // the key transformers 5 reads
  j["use_cache"] = false;
  if (options.origin)
    j["hsring_origin"] = {{"run", options.origin->run}, {"step", options.origin->step}};
  return j;
}

void write_text_file(const fs::path& path, const std::string& text, const WriteOptions& io) {
  AtomicFile file(path.string(), text.size(), io);
  file.write(text.data(), text.size(), 0);
  file.commit();
}

// A new empty sibling of `dir` of a random name: no other writer uses it, and a name
// another user planted beside the export is never written into.
fs::path temporary_folder(const fs::path& dir) {
  const ExclusiveFolder f =
      create_exclusive_folder(dir.parent_path().string(), "." + dir.filename().string() + ".tmp-");
  if (f.error != 0) throw sys_error(Errc::kCheckpoint, f.error, f.path, "cannot create");
  return f.path;
}

void remove_quietly(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

// Puts folder `from` at `to`: a plain rename when `to` does not exist, else an atomic
// exchange (the old folder lands at `from` and is removed), else (a file system without
// RENAME_EXCHANGE) the old folder is moved aside first.
void install_folder(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) == 0) return;
  const int first = errno;
  if (first != EEXIST && first != ENOTEMPTY)
    throw sys_error(Errc::kCheckpoint, first, to.string(),
                    fmt::format("rename from {}", from.string()));
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
    remove_quietly(from);  // now the old export
    return;
  }
  const fs::path aside = temporary_folder(to);  // empty: the rename replaces it
  if (::rename(to.c_str(), aside.c_str()) != 0 || ::rename(from.c_str(), to.c_str()) != 0)
    throw sys_error(Errc::kCheckpoint, errno, to.string(), "cannot replace the folder");
  remove_quietly(aside);
}

// --- reading ---

class ConfigReader {
 public:
  ConfigReader(const json& j, std::string file) : j_(j), file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& what, Errc code = Errc::kCheckpoint) const {
    throw Error(code, file_, what);
  }
  const json& at(const json& obj, const std::string& key, const std::string& where = "") const {
    if (!obj.is_object() || !obj.contains(key)) fail("missing key '" + where + key + "'");
    return obj.at(key);
  }
  uint32_t count(const json& obj, const std::string& key, const std::string& where = "") const {
    const json& v = at(obj, key, where);
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      fail("'" + where + key + "' is " + v.dump() + ", not a non-negative integer");
    return uint32_t(v.get<int64_t>());
  }
  double number(const json& obj, const std::string& key, const std::string& where = "") const {
    const json& v = at(obj, key, where);
    if (!v.is_number()) fail("'" + where + key + "' is " + v.dump() + ", not a number");
    return v.get<double>();
  }
  const json& root() const { return j_; }

 private:
  const json& j_;
  std::string file_;
};

// config.json of export `dir`, parsed; `file` gets its path.
json read_config_json(const std::string& dir, std::string& file) {
  const fs::path folder(dir);
  if (!fs::is_directory(folder))
    throw Error(Errc::kCheckpoint, dir,
                "no such folder: a DFlash export holds config.json and model.safetensors");
  file = (folder / kDflashConfigFile).string();
  const std::string text = read_regular_file(file, Errc::kCheckpoint, kMaxConfigBytes);
  try {
    return parse_json(text, file);  // duplicate keys and deep nesting refused too
  } catch (const Error& e) {
    throw Error(Errc::kCheckpoint, std::string("not JSON: ") + e.what());
  }
}

std::optional<DflashOrigin> origin_of(const ConfigReader& r, const json& j) {
  if (!j.is_object() || !j.contains("hsring_origin")) return std::nullopt;
  const json& o = j.at("hsring_origin");
  const json& run = r.at(o, "run", "hsring_origin.");
  const json& step = r.at(o, "step", "hsring_origin.");
  if (!run.is_string() || !step.is_number_unsigned())
    r.fail("hsring_origin is " + o.dump() +
           ", not {\"run\": a string, \"step\": an unsigned integer}");
  return DflashOrigin{run.get<std::string>(), step.get<uint64_t>()};
}

}  // namespace

void write_dflash_export(const std::string& dir, const DflashConfig& config,
                         std::span<const int32_t> layer_ids, const ParamLayout& layout,
                         std::span<const float> params, const DflashExportOptions& options) {
  if (const std::string problem = train::validate_dflash_config(config); !problem.empty())
    bad_export(dir, "invalid DFlash config: " + problem);
  if (!same_layout(layout, train::dflash_param_layout(config)))
    bad_export(dir, "the parameter layout is not the DFlash layout of its config");
  if (params.size() != layout.total)
    bad_export(dir,
               fmt::format("params hold {} values, the layout {}", params.size(), layout.total));
  if (layer_ids.size() != config.num_captured)
    bad_export(dir, fmt::format("{} target layer ids for {} captured layers", layer_ids.size(),
                                config.num_captured));
  for (const int32_t id : layer_ids)
    if (id < 0 || uint32_t(id) >= options.num_target_layers)
      bad_export(dir, fmt::format("target layer id {} outside the target's {} layers", id,
                                  options.num_target_layers));

  std::vector<Tensor> tensors;
  tensors.reserve(layout.tensors.size());
  for (const train::ParamInfo& p : layout.tensors) {
    const auto values = params.subspan(p.offset, p.size);
    tensors.push_back({p.name, p.shape, std::vector<float>(values.begin(), values.end())});
  }

  const fs::path final_dir = fs::absolute(fs::path(dir)).lexically_normal();
  const fs::path parent = final_dir.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw Error(Errc::kCheckpoint, parent.string(), "cannot create: " + ec.message());
  const fs::path tmp = temporary_folder(final_dir);
  try {
    write_text_file(tmp / kDflashConfigFile, config_json(config, layer_ids, options).dump(2) + "\n",
                    options.io);
    write_text_file(tmp / kDflashModelingFile, std::string(dflash_modeling_source()), options.io);
    ExportOptions st;
    st.dtype = ExportDtype::kBF16;
    st.metadata = {{"format", "pt"}};
    st.io = options.io;
    export_safetensors((tmp / kDflashWeightsFile).string(), tensors, st);
    sync_directory(tmp.string());
    install_folder(tmp, final_dir);
    sync_directory(parent.string());
  } catch (...) {
    remove_quietly(tmp);
    throw;
  }
}

std::optional<DflashOrigin> read_dflash_origin(const std::string& dir) {
  std::string file;
  const json j = read_config_json(dir, file);
  return origin_of(ConfigReader(j, file), j);
}

DflashExport read_dflash_export(const std::string& dir) {
  const fs::path folder(dir);
  std::string file;
  const json j = read_config_json(dir, file);
  const ConfigReader r(j, file);
  if (!j.is_object()) r.fail("not a JSON object");

  const json& arch = r.at(j, "architectures");
  if (arch != json::array({kDflashArchitecture}))
    r.fail("architectures is " + arch.dump() + ", not [\"" + kDflashArchitecture +
               "\"]: not a DFlash drafter",
           Errc::kCheckpoint);
  if (const json& type = r.at(j, "model_type"); type != "qwen3")
    r.fail("model_type is " + type.dump() + ", not \"qwen3\"");

  DflashExport out;
  out.origin = origin_of(r, j);
  DflashConfig& c = out.config;
  c.target_hidden = r.count(j, "hidden_size");
  c.vocab_size = r.count(j, "vocab_size");
  c.num_layers = r.count(j, "num_hidden_layers");
  c.num_heads = r.count(j, "num_attention_heads");
  c.num_kv_heads = r.count(j, "num_key_value_heads");
  c.head_dim = j.contains("head_dim") ? r.count(j, "head_dim")
                                      : (c.num_heads ? c.target_hidden / c.num_heads : 0);
  c.intermediate_size = r.count(j, "intermediate_size");
  c.rms_norm_eps = r.number(j, "rms_norm_eps");
  out.num_target_layers = r.count(j, "num_target_layers");
  out.max_position_embeddings = r.count(j, "max_position_embeddings");
  if (out.max_position_embeddings == 0)
    r.fail("'max_position_embeddings' is 0: a drafter reads at least one position");

  // RoPE base: rope_theta (older transformers) and/or rope_parameters (newer), the same.
  const bool flat_theta = j.contains("rope_theta");
  const bool has_params = j.contains("rope_parameters") && !j.at("rope_parameters").is_null();
  if (!flat_theta && !has_params) r.fail("missing key 'rope_theta' (or 'rope_parameters')");
  if (flat_theta) c.rope_theta = r.number(j, "rope_theta");
  if (has_params) {
    const json& rp = j.at("rope_parameters");
    if (const json& type = r.at(rp, "rope_type", "rope_parameters."); type != "default")
      r.fail("rope_parameters.rope_type is " + type.dump() +
             "; only \"default\" RoPE is supported");
    const double theta = r.number(rp, "rope_theta", "rope_parameters.");
    if (flat_theta && theta != c.rope_theta)
      r.fail(fmt::format("rope_theta {:f} and rope_parameters.rope_theta {:f} differ", c.rope_theta,
                         theta));
    c.rope_theta = theta;
  }
  if (j.contains("rope_scaling") && !j.at("rope_scaling").is_null())
    r.fail("rope_scaling is set; only default RoPE is supported");
  if (j.contains("attention_bias") && j.at("attention_bias") != false)
    r.fail("attention_bias is " + j.at("attention_bias").dump() + "; the drafter has no biases");
  if (j.contains("hidden_act") && j.at("hidden_act") != "silu")
    r.fail("hidden_act is " + j.at("hidden_act").dump() + ", not \"silu\"");
  if (j.contains("is_causal") && j.at("is_causal") != false)
    r.fail("is_causal is " + j.at("is_causal").dump() + "; hsring drafts blocks bidirectionally");
  if (j.contains("use_sliding_window") && j.at("use_sliding_window") != false)
    r.fail("use_sliding_window is set; sliding-window draft layers are not supported");
  if (j.contains("layer_types")) {
    const json& types = j.at("layer_types");
    if (!types.is_array() || types.size() != c.num_layers)
      r.fail("layer_types is " + types.dump() + ", not one entry per draft layer");
    for (const json& t : types)
      if (t != "full_attention")
        r.fail("layer_types holds " + t.dump() + "; only \"full_attention\" is supported");
  }

  const json& dc = r.at(j, "dflash_config");
  c.block_size = r.count(dc, "block_size", "dflash_config.");
  if (j.contains("block_size") && r.count(j, "block_size") != c.block_size)
    r.fail(fmt::format("block_size {} and dflash_config.block_size {} differ",
                       j.at("block_size").dump(), c.block_size));
  c.mask_token_id = int32_t(r.count(dc, "mask_token_id", "dflash_config."));
  if (dc.contains("mask_token")) {
    const json& text = dc.at("mask_token");
    if (!text.is_string() || text.get<std::string>().empty())
      r.fail("dflash_config.mask_token is " + text.dump() + ", not a token text");
    out.mask_token = text.get<std::string>();
  }
  // A target has at most kMaxModelLayers layers (model/model_config.h), so
  // a list of more ids, or a repeated id, is refused before its size reaches an allocation.
  if (out.num_target_layers > kMaxModelLayers)
    r.fail(fmt::format("num_target_layers is {}, more than the {} layers a target can have",
                       out.num_target_layers, kMaxModelLayers));
  const json& ids = r.at(dc, "target_layer_ids", "dflash_config.");
  if (!ids.is_array() || ids.empty())
    r.fail("dflash_config.target_layer_ids is " + ids.dump() + ", not a list of layer ids");
  if (ids.size() > out.num_target_layers)
    r.fail(
        fmt::format("dflash_config.target_layer_ids lists {} layers of a target of {} "
                    "(num_target_layers): each layer can be captured once",
                    ids.size(), out.num_target_layers));
  std::set<int64_t> seen;
  for (const json& id : ids) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= int64_t(out.num_target_layers))
      r.fail(
          fmt::format("dflash_config.target_layer_ids holds {}, not a layer id below "
                      "num_target_layers {}",
                      id.dump(), out.num_target_layers));
    if (!seen.insert(id.get<int64_t>()).second)
      r.fail("dflash_config.target_layer_ids lists layer " + id.dump() +
             " twice: each layer can be captured once");
    out.layer_ids.push_back(int32_t(id.get<int64_t>()));
  }
  c.num_captured = uint32_t(out.layer_ids.size());
  if (const std::string problem = train::validate_dflash_config(c); !problem.empty())
    r.fail("not a usable DFlash drafter: " + problem);

  out.layout = train::dflash_param_layout(c);
  const auto weights = SafetensorsFile::open(folder / kDflashWeightsFile);
  const std::string weights_file = weights->path().string();
  std::set<std::string> expected;
  // Every tensor is found with its shape before the parameters are allocated: sizes in
  // config.json are then bounded by what model.safetensors holds.
  for (const train::ParamInfo& p : out.layout.tensors) {
    expected.insert(p.name);
    const TensorInfo* t = weights->find(p.name);
    if (!t) throw Error(Errc::kCheckpoint, weights_file, "missing tensor " + p.name);
    if (t->shape != p.shape)
      throw Error(Errc::kCheckpoint, weights_file,
                  "tensor " + p.name + " has shape " + shape_string(t->shape) +
                      ", config.json implies " + shape_string(p.shape));
    if (t->dtype != "BF16" && t->dtype != "F16" && t->dtype != "F32")
      throw Error(Errc::kCheckpoint, weights_file,
                  "tensor " + p.name + " has dtype " + t->dtype + ", not a float one");
  }
  out.params.assign(out.layout.total, 0.0f);
  for (const train::ParamInfo& p : out.layout.tensors)
    weights->read_weights(p.name, p.shape, std::span<float>(out.params).subspan(p.offset, p.size));
  for (const TensorInfo& t : weights->tensors())
    if (!expected.count(t.name))
      throw Error(Errc::kCheckpoint, weights_file,
                  "unexpected tensor " + t.name +
                      " (a DFlash export holds the drafter's weights only: no "
                      "embedding, no LM head)");
  return out;
}

}  // namespace hsring::checkpoint
