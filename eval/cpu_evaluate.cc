#include "eval/cpu_evaluate.h"

#include <string>

#include "common/error.h"
#include "eval/speculative_decode.h"

namespace hsring::eval {
EvalReport evaluate(CpuTargetModel& target, const checkpoint::DflashExport& drafter,
                    std::span<const EvalPrompt> prompts, uint32_t max_new_tokens, uint32_t threads,
                    const SamplingOptions& sampling) {
  check_drafter_fits(target.config(), drafter);
  const ModelWeights& w = target.weights();
  train::DflashModel model(drafter.config, {w.embed_tokens, w.lm_head_or_embeddings()}, 0, threads);
  std::copy(drafter.params.begin(), drafter.params.end(), model.params().begin());
  std::vector<SpeculativeResult> speculative;
  std::vector<std::vector<int32_t>> greedy;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const EvalPrompt& prompt = prompts[i];
    if (!sampling.greedy()) {
      const DraftSampling draw{PromptSampler(sampling, i), w.lm_head_or_embeddings()};
      speculative.push_back(speculative_decode(target, model, drafter.layer_ids, prompt.tokens,
                                               max_new_tokens, &draw));
      continue;
    }
    speculative.push_back(
        speculative_decode(target, model, drafter.layer_ids, prompt.tokens, max_new_tokens));
    const std::vector<int32_t>& output = speculative.back().tokens;
    greedy.push_back(is_greedy_continuation(target, prompt.tokens, output)
                         ? output
                         : greedy_decode(target, prompt.tokens, max_new_tokens));
  }
  return summarise_decoding(prompts, speculative, greedy, drafter.config.block_size, sampling);
}

}  // namespace hsring::eval
