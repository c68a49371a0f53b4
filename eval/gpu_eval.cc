#include "eval/gpu_eval.h"

#include <chrono>

#include "eval/gpu_speculative_decode.h"

namespace hsring::eval {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

EvalReport evaluate_on_gpu(const GpuEvalOptions& options, const checkpoint::DflashExport& drafter,
                           std::span<const EvalPrompt> chosen, uint32_t max_new_tokens) {
  const auto target = open_cuda_model(options.model, options.model_seed, options.gpu);
  const TargetHead head = load_target_head(options.model, options.model_seed);
  return evaluate_on_gpu(*target, head, drafter, chosen, max_new_tokens, options.group,
                         options.sampling);
}

EvalReport evaluate_on_gpu(CudaTargetModel& target, const TargetHead& head,
                           const checkpoint::DflashExport& drafter,
                           std::span<const EvalPrompt> chosen, uint32_t max_new_tokens,
                           uint32_t group, const SamplingOptions& sampling) {
  std::vector<std::vector<int32_t>> tokens;
  for (const EvalPrompt& p : chosen) tokens.push_back(p.tokens);
  const std::span<const std::vector<int32_t>> prompts = tokens;
  GpuSpeculativeDecoder decoder(target, drafter, head, group);
  // A first forward allocates the target's scratch: not part of either timing.
  decoder.greedy(prompts.first(1), 1);

  auto start = std::chrono::steady_clock::now();
  std::vector<SpeculativeResult> speculative =
      decoder.speculative(prompts, max_new_tokens, sampling);
  const double speculative_s = seconds_since(start);
  // The baseline decodes as the run does: plain greedy decoding, or plain sampling.
  start = std::chrono::steady_clock::now();
  std::vector<std::vector<int32_t>> greedy = decoder.greedy(prompts, max_new_tokens, sampling);
  const double greedy_s = seconds_since(start);
  if (!sampling.greedy()) greedy.clear();  // timed only: sampled tokens are not compared

  EvalReport report =
      summarise_decoding(chosen, speculative, greedy, drafter.config.block_size, sampling);
  report.speculative_seconds = speculative_s;
  report.greedy_seconds = greedy_s;
  return report;
}

}  // namespace hsring::eval
