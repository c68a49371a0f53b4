// `hsring eval --gpu N`: a DFlash export decoded speculatively on GPU N against the CUDA
// target (eval/gpu_speculative_decode.h), checked against plain greedy decoding on the same
// GPU, both timed, so the report gives the speed-up a user sees beside the ideal one. A
// sampled run (--temperature) is timed against plain sampling and has no greedy check.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/dflash_export.h"
#include "eval/eval_prompts.h"
#include "eval/eval_report.h"
#include "eval/sampling.h"
#include "model/cuda_target_model.h"
#include "model/target_head.h"

namespace hsring::eval {

struct GpuEvalOptions {
  std::string model;  // a preset or a Hugging Face folder (resolved: not "builtin")
  uint64_t model_seed = 0;
  int gpu = 0;
  uint32_t group = 16;  // prompts per forward
  SamplingOptions sampling;
};

// Throws Error(kModel) when the drafter does not fit the target or a prompt is bad,
// Error(kCuda) for CUDA failures (no such GPU, out of memory).
EvalReport evaluate_on_gpu(const GpuEvalOptions& options, const checkpoint::DflashExport& drafter,
                           std::span<const EvalPrompt> prompts, uint32_t max_new_tokens);

// The same on a target already loaded (its embedding and LM head `head`): the end of a
// GPU run evaluates two drafters against one target.
EvalReport evaluate_on_gpu(CudaTargetModel& target, const TargetHead& head,
                           const checkpoint::DflashExport& drafter,
                           std::span<const EvalPrompt> prompts, uint32_t max_new_tokens,
                           uint32_t group, const SamplingOptions& sampling = {});

}  // namespace hsring::eval
