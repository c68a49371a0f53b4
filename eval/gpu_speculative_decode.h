// Speculative decoding on one GPU, many prompts at a time (`hsring eval --gpu`): the CUDA
// target forward (model/cuda_target_model.h) verifies, the DFlash drafter's CUDA forward
// (train::CudaDflashTrainer::draft, fp32) drafts. Each step packs every unfinished prompt as
// one document of a single target forward and of a single drafter forward, so a group of P
// prompts costs two forwards a step, not 2P.
//
// The same algorithm, step for step, as the CPU's speculative_decode
// (eval/speculative_decode.h): the prefill's greedy token is the first anchor, a block is
// drafted from the captured layers of the rows before its anchor, one target forward over
// the sequence and the block verifies it, the longest agreeing prefix and the target's bonus
// token are kept, and the last blocks are cut to the tokens left. Like the CPU path it
// recomputes each prompt's whole sequence at every step (no KV cache yet), so a step's cost
// grows with the sequence; plain greedy decoding (greedy()) runs the same way, so the two
// are timed on equal terms.
//
// Sampled runs (a non-greedy SamplingOptions) follow the CPU's speculative sampling too:
// the drafter's logits and the target's logits of each block come back to the host, where
// the one sampler of eval/sampling.h draws and verifies, keyed by the prompt's index, so a
// prompt's tokens do not depend on the group it decodes in.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "checkpoint/dflash_export.h"
#include "eval/sampling.h"
#include "eval/speculative_decode.h"
#include "model/cuda_target_model.h"
#include "model/target_head.h"

namespace hsring::eval {

// Thread safety: none; one decode at a time (it owns the drafter and the scratch).
class GpuSpeculativeDecoder {
 public:
  // The drafter `drafter` (its embedding and LM head: `head`'s, the target's) on the target's
  // GPU. `group` prompts go through each forward together (> 0). Throws Error(kModel)
  // when the drafter does not fit the target (width, vocabulary, layer ids), Error(kCuda).
  GpuSpeculativeDecoder(CudaTargetModel& target, const checkpoint::DflashExport& drafter,
                        const TargetHead& head, uint32_t group = 16);
  ~GpuSpeculativeDecoder();
  GpuSpeculativeDecoder(const GpuSpeculativeDecoder&) = delete;
  GpuSpeculativeDecoder& operator=(const GpuSpeculativeDecoder&) = delete;

  // Each prompt decoded speculatively to max_new_tokens tokens, results in prompt order;
  // with a non-greedy `sampling`, by speculative sampling, prompt i keyed as i.
  // Throws Error(kModel) for an empty prompt or a token outside the vocabulary.
  std::vector<SpeculativeResult> speculative(std::span<const std::vector<int32_t>> prompts,
                                             uint32_t max_new_tokens,
                                             const SamplingOptions& sampling = {});
  // Plain greedy decoding of each prompt (or plain sampling, as speculative's), one target
  // forward per token for a whole group.
  std::vector<std::vector<int32_t>> greedy(std::span<const std::vector<int32_t>> prompts,
                                           uint32_t max_new_tokens,
                                           const SamplingOptions& sampling = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hsring::eval
