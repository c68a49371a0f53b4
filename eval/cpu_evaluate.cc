#include "eval/cpu_evaluate.h"

#include <string>

#include "common/error.h"
#include "eval/speculative_decode.h"

namespace hsring::eval {
namespace {

[[noreturn]] void bad_input(const std::string& what) { throw Error(Errc::kModelBadInput, what); }

}  // namespace

void check_drafter_fits(const ModelConfig& target, const checkpoint::DflashExport& drafter) {
  const train::DflashConfig& c = drafter.config;
  if (c.target_hidden != target.hidden_size)
    bad_input("the drafter's hidden_size " + std::to_string(c.target_hidden) + " is not target " +
              target.name + "'s " + std::to_string(target.hidden_size) +
              ": it was trained against another model");
  if (c.vocab_size != target.vocab_size)
    bad_input("the drafter's vocab_size " + std::to_string(c.vocab_size) + " is not target " +
              target.name + "'s " + std::to_string(target.vocab_size));
  if (drafter.num_target_layers != target.num_layers)
    bad_input("the drafter's num_target_layers " + std::to_string(drafter.num_target_layers) +
              " is not target " + target.name + "'s " + std::to_string(target.num_layers) +
              " layers");
}

EvalReport evaluate(CpuTargetModel& target, const checkpoint::DflashExport& drafter,
                    std::span<const EvalPrompt> prompts, uint32_t max_new_tokens,
                    uint32_t threads) {
  check_drafter_fits(target.config(), drafter);
  const ModelWeights& w = target.weights();
  train::DflashModel model(drafter.config, {w.embed_tokens, w.lm_head_or_embeddings()}, 0, threads);
  std::copy(drafter.params.begin(), drafter.params.end(), model.params().begin());
  std::vector<SpeculativeResult> speculative;
  std::vector<std::vector<int32_t>> greedy;
  for (const EvalPrompt& prompt : prompts) {
    speculative.push_back(
        speculative_decode(target, model, drafter.layer_ids, prompt.tokens, max_new_tokens));
    const std::vector<int32_t>& output = speculative.back().tokens;
    greedy.push_back(is_greedy_continuation(target, prompt.tokens, output)
                         ? output
                         : greedy_decode(target, prompt.tokens, max_new_tokens));
  }
  return summarise_decoding(prompts, speculative, greedy, drafter.config.block_size);
}

}  // namespace hsring::eval
