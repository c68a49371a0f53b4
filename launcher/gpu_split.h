// How hsring run splits a machine's GPUs between targets and drafters when neither
// --targets nor --drafters is given (--split): the split that delivers the most tokens/s,
// from what one GPU of each kind does, or a fixed ratio.
#pragma once

#include <string>

#include "model/model_config.h"
#include "train/dflash_config.h"

namespace hsring {

// Tokens/s one GPU delivers: a target's forwards, a drafter's training steps.
struct StageRates {
  double target = 0;
  double drafter = 0;
};

// --split: "auto", or a ratio "T:D" of targets to drafters (5:3 kept the old default).
// Throws Error(kUsage) naming the flag and the forms it takes.
struct SplitRequest {
  bool automatic = true;
  int targets = 0, drafters = 0;  // the ratio, when !automatic
};
SplitRequest parse_split(const std::string& text);

// The target count t in [1, gpus - 1] that delivers the most, min(t * rates.target,
// (gpus - t) * rates.drafter); on a tie the fewer targets, as drafter GPUs also evaluate.
// REQUIRES: gpus >= 2, both rates > 0.
int best_target_count(int gpus, StageRates rates);
// The ratio's target count of `gpus` (>= 2), rounded, at least one of each.
int ratio_target_count(int gpus, int targets, int drafters);

// What one GPU of each kind delivers, read from the shapes: the FLOPs a token costs in
// the target's forward and in the drafter's step (anchors blocks in a batch of `tokens`),
// each at the share of the GPU's bf16 GEMM rate (`gemm_tflops`) that hsring's kernels
// reach at those shapes (bench/RESULTS.md). Documents are taken as 2048 tokens long.
StageRates estimate_stage_rates(const ModelConfig& target, const train::DflashConfig& drafter,
                                double tokens, double anchors, double gemm_tflops);

// The shares of the GEMM rate measured on an H100 / H200 (bench/RESULTS.md): dense and
// hybrid forwards (each the median of three runs with the wgmma attention, qwen3-8b and
// qwen3.6-27b on an H100, 2026-12-07), and the DFlash step.
inline constexpr double kDenseForwardShare = 0.75;
inline constexpr double kHybridForwardShare = 0.78;
inline constexpr double kDflashStepShare = 0.767;
// cuBLAS's bf16 GEMM rate measured on the H100 and H200 of the device machine (800-820).
inline constexpr double kNominalGemmTflops = 800;

}  // namespace hsring
