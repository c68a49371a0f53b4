// The CPU decoder of `hsring eval`: each prompt decoded speculatively against the CPU target
// (full forwards, no cache) and checked against plain greedy decoding, summed up by
// summarise_decoding (eval/eval_report.h) as the GPU decoder's are.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "checkpoint/dflash_export.h"
#include "eval/eval_prompts.h"
#include "eval/eval_report.h"
#include "model/cpu_target_model.h"

namespace hsring::eval {

// Decodes every prompt speculatively with `drafter` (its embedding and LM head: the
// target's) for `max_new_tokens`, checks each output against greedy decoding (one forward,
// is_greedy_continuation, when it matches; greedy_decode in full when it does not, for the
// report's `greedy`) and sums up (summarise_decoding). With a non-greedy `sampling`, prompt
// i is decoded by speculative sampling keyed by (sampling.seed, i) and not checked against
// greedy decoding. Throws Error(kModel) when the drafter does not fit the target or a
// prompt does.
EvalReport evaluate(CpuTargetModel& target, const checkpoint::DflashExport& drafter,
                    std::span<const EvalPrompt> prompts, uint32_t max_new_tokens,
                    uint32_t threads = 1, const SamplingOptions& sampling = {});

}  // namespace hsring::eval
