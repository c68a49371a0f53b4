#include "launcher/gpu_split.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "common/error.h"
#include "model/forward_flops.h"
#include "train/dflash_flops.h"

namespace hsring {

namespace {

constexpr double kDocumentTokens = 2048;

int parse_count(std::string_view text) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() ? value : 0;
}

}  // namespace

SplitRequest parse_split(const std::string& text) {
  if (text == "auto") return {};
  const size_t colon = text.find(':');
  SplitRequest request{false, 0, 0};
  if (colon != std::string::npos) {
    request.targets = parse_count(std::string_view(text).substr(0, colon));
    request.drafters = parse_count(std::string_view(text).substr(colon + 1));
  }
  if (request.targets < 1 || request.drafters < 1 || request.targets > 1024 ||
      request.drafters > 1024)
    throw Error(Errc::kUsage, "--split '" + text +
                                  "': expected auto, or targets:drafters as two positive "
                                  "counts such as 5:3");
  return request;
}

int best_target_count(int gpus, StageRates rates) {
  int best = 1;
  double best_delivered = -1;
  for (int t = 1; t < gpus; ++t) {
    const double delivered = std::min(t * rates.target, (gpus - t) * rates.drafter);
    if (delivered > best_delivered * (1 + 1e-9)) {
      best = t;
      best_delivered = delivered;
    }
  }
  return best;
}

int ratio_target_count(int gpus, int targets, int drafters) {
  const double share = double(targets) / double(targets + drafters);
  return std::clamp(int(std::lround(gpus * share)), 1, gpus - 1);
}

StageRates estimate_stage_rates(const ModelConfig& target, const train::DflashConfig& drafter,
                                double tokens, double anchors, double gemm_tflops) {
  bool hybrid = false;
  for (uint32_t i = 0; i < target.num_layers; ++i) hybrid |= target.kind(i) == LayerKind::kDeltaNet;
  // Each token attends to half its document on average, itself included.
  const double keys_seen = tokens * (kDocumentTokens / 2);
  const double forward = forward_flops(target, tokens, keys_seen);
  // A block's queries see its anchor's context (half a document on average) and the block.
  const double pairs = anchors * drafter.block_size * (kDocumentTokens / 2 + drafter.block_size);
  const double step = train::dflash_step_flops(drafter, tokens, anchors, pairs);
  const double rate = gemm_tflops * 1e12;
  return {rate * (hybrid ? kHybridForwardShare : kDenseForwardShare) * tokens / forward,
          rate * kDflashStepShare * tokens / step};
}

}  // namespace hsring
