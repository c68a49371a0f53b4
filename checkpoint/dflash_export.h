// The DFlash drafter folder that SGLang (--speculative-algorithm DFLASH), vLLM (method
// dflash) and transformers (the reference DFlashDraftModel, or AutoModel with
// trust_remote_code) load: config.json, a bf16 model.safetensors holding the drafter's own
// weights, without the target's embedding and LM head, and the model's Python file
// (docs/dflash-export.md). Written atomically; read back for `hsring eval`, so what is
// measured is what is served.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/atomic_file.h"
#include "train/dflash_config.h"
#include "train/param_layout.h"

namespace hsring::checkpoint {

inline constexpr const char* kDflashArchitecture = "DFlashDraftModel";
inline constexpr const char* kDflashConfigFile = "config.json";
inline constexpr const char* kDflashWeightsFile = "model.safetensors";
// The Python model that config.json's auto_map names for trust_remote_code loading.
inline constexpr const char* kDflashModelingFile = "modeling_dflash.py";
inline constexpr const char* kDflashAutoModel = "modeling_dflash.DFlashDraftModel";

// Which run, at which optimizer step, wrote an export: config.json's "hsring_origin"
// object ({"run": ..., "step": ...}; loaders of DFlash folders ignore unknown keys). A
// launcher checks it before it reports an export's quality as its run's, so a RUN_DIR/export
// left by an earlier run is never taken for this one's.
struct DflashOrigin {
  std::string run;  // the ring's run identity (Ring::run_identity)
  uint64_t step = 0;
  bool operator==(const DflashOrigin&) const = default;
};

struct DflashExportOptions {
  uint32_t num_target_layers = 0;  // the target's decoder layers; > every layer id
  uint32_t max_position_embeddings = 40960;
  // dflash_config.mask_token: the text that names config.mask_token_id in the target's
  // tokenizer (train::mask_token_text); "" writes the id only (a target without one).
  std::string mask_token;
  std::optional<DflashOrigin> origin;  // written when set
  WriteOptions io;
};

// Writes folder `dir`: config.json, modeling_dflash.py and model.safetensors (bf16, rounded
// to nearest even) of the drafter whose parameters are `params` in `layout`
// (dflash_param_layout(config)),
// fed by target layers `layer_ids` (layer id i: the output of decoder layer i, HF
// hidden_states[i + 1]). Both files go into a temporary sibling folder, fsynced, which then
// replaces `dir` in one rename (an existing `dir` is exchanged atomically, then removed).
// Throws Error: bad checkpoint when the config is invalid, the layout is not
// dflash_param_layout(config), params has not layout.total values, layer_ids does not hold
// config.num_captured ids in [0, num_target_layers); no space, I/O. Nothing is left behind
// on failure.
void write_dflash_export(const std::string& dir, const train::DflashConfig& config,
                         std::span<const int32_t> layer_ids, const train::ParamLayout& layout,
                         std::span<const float> params, const DflashExportOptions& options);

struct DflashExport {
  // The shape, block size and mask token from config.json; loss_gamma is not exported and
  // reads as the default, 7.
  train::DflashConfig config;
  std::vector<int32_t> layer_ids;  // dflash_config.target_layer_ids
  std::string mask_token;          // dflash_config.mask_token, "" when absent
  uint32_t num_target_layers = 0;
  uint32_t max_position_embeddings = 0;
  train::ParamLayout layout;           // dflash_param_layout(config)
  std::vector<float> params;           // layout.total values, gaps zero
  std::optional<DflashOrigin> origin;  // nullopt: written elsewhere, or by an older hsring
};

// Reads a folder written by write_dflash_export (or any DFlash drafter of this shape).
// Throws Error naming the file and the problem: I/O for a missing folder or
// file; foreign when architectures is not ["DFlashDraftModel"]; bad header for JSON that
// does not parse, a missing or mistyped key, values that contradict each other (a block
// size in two places, layer ids outside num_target_layers) or a config the drafter cannot
// run (sliding windows, causal layers, an invalid shape); bad table for a missing, extra,
// misshapen or non-float tensor. A malformed safetensors file throws Error (bad file)
// from SafetensorsFile::open, also naming the file.
DflashExport read_dflash_export(const std::string& dir);

// Only the origin of export `dir` (config.json alone, not the weights): nullopt when it
// carries none. Throws Error as read_dflash_export does for a missing or malformed config.json
// or a malformed "hsring_origin".
std::optional<DflashOrigin> read_dflash_origin(const std::string& dir);

}  // namespace hsring::checkpoint
