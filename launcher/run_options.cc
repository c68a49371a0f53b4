#include "launcher/run_options.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "common/error.h"
#include "model/model_config.h"
#include "model/target_model.h"

namespace hsring {

namespace {

std::vector<int32_t> parse_layer_list(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    long value = -1;
    try {
      value = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || value < 0 || value > (1 << 20))
      throw Error(Errc::kUsage, "--layers: '" + item +
                                    "' is not a layer id: give comma-separated ids like 1,16,31");
    ids.push_back(int32_t(value));
  }
  if (ids.empty()) throw Error(Errc::kUsage, "--layers names no layer: give ids like 1,16,31");
  return ids;
}

// Sets the model-dependent part of the shape: hidden size, vocabulary, captured layers.
void apply_model(const RunOptions& o, const WorkerSpec& targets, RingShape& s) {
  ModelConfig config;
  try {
    // Targets that are user commands run the model themselves: hsring's processes need
    // only its outline, whatever the architecture. Its own targets refuse here, before
    // anything starts, what their forward cannot run.
    if (!o.target_cmd.empty()) {
      config = model_outline_of(o.model);
    } else {
      config = model_config_of(o.model);
      if (std::string why = targets.cpu ? "" : cuda_forward_refusal(config); !why.empty())
        throw Error(Errc::kModelBadConfig, why);
    }
  } catch (Error& e) {
    // A model error keeps its code and class (exit 2); a usage error names the flag itself.
    if (e.layer() == ErrorClass::kModel) e.prepend("--model: ");
    throw;
  }
  if (o.hidden_size != 0 && o.hidden_size != config.hidden_size)
    throw Error(Errc::kUsage,
                fmt::format("--hidden-size {} differs from the model's {}: leave it out",
                            o.hidden_size, config.hidden_size));
  std::vector<int32_t> ids;
  if (!o.layers.empty()) {
    ids = parse_layer_list(o.layers);
    if (o.num_layers != 0 && o.num_layers != ids.size())
      throw Error(Errc::kUsage,
                  fmt::format("--num-layers {} but --layers names {}: give one of them",
                              o.num_layers, ids.size()));
  } else {
    // Unasked, as many as the model has below its last layer, up to the default (a small
    // model has fewer; default_capture_layers says why not the last).
    const uint32_t k = o.num_layers
                           ? o.num_layers
                           : std::min(kDefaultCapturedLayers, std::max(config.num_layers, 2u) - 1);
    if (k > config.num_layers)
      throw Error(Errc::kUsage, fmt::format("--num-layers {} exceeds the model's {} layers", k,
                                            config.num_layers));
    ids = capture_layers_for(config, k);  // full-attention layers of a hybrid model
  }
  if (ids.size() > kMaxCapturedLayers)
    throw Error(Errc::kUsage, fmt::format("--layers names {} layers; a ring holds at most {}",
                                          ids.size(), kMaxCapturedLayers));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (uint32_t(ids[i]) >= config.num_layers)
      throw Error(Errc::kUsage,
                  fmt::format("--layers: layer {} is outside the model's {} layers (ids 0..{})",
                              ids[i], config.num_layers, config.num_layers - 1));
    if (std::find(ids.begin(), ids.begin() + i, ids[i]) != ids.begin() + i)
      throw Error(Errc::kUsage, fmt::format("--layers: layer {} is named twice", ids[i]));
    s.layer_ids[i] = ids[i];
  }
  s.num_layers = uint32_t(ids.size());
  s.hidden_size = config.hidden_size;
  s.vocab_size = config.vocab_size;
  s.content = PayloadContent::kModel;
}

}  // namespace

RingShape ring_shape_of(const RunOptions& o, const WorkerSpec& targets,
                        const WorkerSpec& drafters) {
  RingShape s;
  s.slot_count = o.slots;
  s.max_tokens = o.max_tokens;
  s.hidden_size = o.hidden_size ? o.hidden_size : kSyntheticHiddenSize;
  s.num_layers = o.num_layers ? o.num_layers : kDefaultCapturedLayers;
  if (!runs_model(o) && !o.layers.empty())
    throw Error(
        Errc::kUsage,
        "--layers needs a model (--model tiny, ...); synthetic batches number their layers 0..K-1");
  s.dtype = o.dtype == "fp32" ? DType::kFP32 : o.dtype == "fp16" ? DType::kFP16 : DType::kBF16;
  s.split_layers = o.split_layers ? 1 : 0;
  s.num_targets = targets.count;
  s.num_drafters = drafters.count;
  s.hs_min_ready = o.hs_min_ready;
  for (uint32_t k = 0; k < s.num_layers; ++k) s.layer_ids[k] = int32_t(k);
  if (runs_model(o)) apply_model(o, targets, s);
  const bool unbounded = o.batches == 0 && o.seconds > 0;
  const uint64_t default_batches = runs_model(o) ? kDefaultModelRunBatches : kDefaultRunBatches;
  s.batch_limit = unbounded ? 0 : (o.batches ? o.batches : default_batches);
  s.ledger_capacity = std::max<uint64_t>(s.batch_limit, 1u << 20);
  if (o.deterministic) {
    if (s.batch_limit == 0)
      throw Error(Errc::kUsage,
                  "--deterministic needs --batches: a run that ends at a time (--seconds alone) "
                  "trains on however many batches arrived by then");
    s.ordered_claims = 1;
  }
  return s;
}

RestartLimits restart_limits_of(const RunOptions& o) {
  RestartLimits limits;
  limits.max_crashes = o.max_restarts;
  limits.window_ns = uint64_t(o.restart_window_s * 1e9);
  return limits;
}

}  // namespace hsring
