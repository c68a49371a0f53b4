// Speculative decoding with greedy verification (or speculative sampling, eval/sampling.h)
// on a target model and a DFlash drafter, one prompt at a time: the drafter drafts a block
// from the target's captured layers, one target forward verifies it, the longest agreeing
// (accepted) prefix is kept plus the target's bonus token. The reference for what `hsring eval`
// measures (docs/drafter-training.md, "Measuring acceptance: hsring eval").
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "checkpoint/dflash_export.h"
#include "eval/sampling.h"
#include "model/target_model.h"
#include "train/dflash_model.h"

namespace hsring::eval {

// Throws Error(kModel) naming the field when `drafter` was not trained against a
// target shaped like `target` (its width, vocabulary and layer count): every decoder
// checks this before it loads weights.
void check_drafter_fits(const ModelConfig& target, const checkpoint::DflashExport& drafter);

struct SpeculativeResult {
  std::vector<int32_t> tokens;  // the generated tokens, max_new_tokens of them
  // Per verifying target forward: tokens it produced (accepted drafts + the bonus token,
  // cut at max_new_tokens). The prefill forward's token is not counted, as in the reference.
  std::vector<uint32_t> produced;
  // [B]: verified[j] steps that verified block position j, accepted[j] those whose drafted
  // positions 1..j all matched the target; index 0 counts every step in both.
  std::vector<uint64_t> verified, accepted;
};

// Plain sampling, greedy_decode's twin: each token sampled by `sampler` from the target's
// logits after the tokens before it (its row: its place in prompt + output).
std::vector<int32_t> sample_decode(TargetModel& target, std::span<const int32_t> prompt,
                                   uint32_t max_new_tokens, const PromptSampler& sampler,
                                   std::span<const int32_t> stop_tokens = {});

// Plain greedy decoding: max_new_tokens tokens, each from a full forward over the prompt
// and the tokens so far (no cache), or fewer when a token of `stop_tokens` comes first (it
// is the last token returned). Throws Error(kModel) for an empty prompt.
std::vector<int32_t> greedy_decode(TargetModel& target, std::span<const int32_t> prompt,
                                   uint32_t max_new_tokens,
                                   std::span<const int32_t> stop_tokens = {});

// True when `output` is what plain greedy decoding produces after `prompt`: every token is
// the target's greedy token after the tokens before it. One forward over prompt + output
// answers it (the target is causal: row t sees rows 0..t only, as greedy_decode's forward
// over those tokens does), where greedy_decode needs one per token. Throws
// Error(kModel) for an empty prompt.
bool is_greedy_continuation(TargetModel& target, std::span<const int32_t> prompt,
                            std::span<const int32_t> output);

// Speculative sampling instead of greedy verification: the prompt's sampler, and the LM head
// ([V, H], the target's) through which the drafter's logits are computed from its final
// hidden states, for its distributions q.
struct DraftSampling {
  PromptSampler sampler;
  std::span<const float> lm_head;
};

// Speculative decoding of max_new_tokens tokens after `prompt`. The prefill forward gives the
// first anchor (the target's greedy next token); each step drafts the block of the anchor
// at row s (its context: the captured layers `layer_ids` of rows [0, s), from the previous
// target forward), verifies it with one full forward over rows [0, s + v) (v = min(B,
// prompt + max_new_tokens - s)), accepts the drafts equal to the target's greedy tokens up
// to the first mismatch, and appends the target's token after the last accepted row (the
// bonus), the next anchor. The full forward is recomputed each step (no KV cache): slower,
// the same tokens. With `sampling`, every token is sampled instead (the first anchor from
// the target, drafts from the drafter's q) and each block is settled by
// PromptSampler::verify_block. Throws Error(kModel) when the prompt is empty, the
// drafter's width or vocabulary is not the target's, or `layer_ids` does not fit both.
SpeculativeResult speculative_decode(TargetModel& target, train::DflashModel& drafter,
                                     std::span<const int32_t> layer_ids,
                                     std::span<const int32_t> prompt, uint32_t max_new_tokens,
                                     const DraftSampling* sampling = nullptr);

// The first block speculative_decode drafts for `prompt`, with its logits: for
// `hsring eval --dump-block`, which the reference test (tests/reference) compares with the
// reference DFlashDraftModel. Throws Error(kModel) like speculative_decode, or when
// `lm_head` is not [V, H].
struct DraftedBlock {
  uint32_t context_length = 0;  // context rows: the prompt; the anchor stands at this row
  int32_t anchor = 0;           // the target's greedy token after the prompt (position 0)
  std::vector<int32_t> drafts;  // [B - 1]: the argmax of positions 1..B-1 (first on ties)
  std::vector<float> logits;    // [B - 1, V]: final hidden state . lm_head rows (double sums)
};
DraftedBlock first_block(TargetModel& target, train::DflashModel& drafter,
                         std::span<const int32_t> layer_ids, std::span<const int32_t> prompt,
                         std::span<const float> lm_head);

}  // namespace hsring::eval
