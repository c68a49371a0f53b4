// DFlash batches and target weights that own their data, for the DFlash drafter's tests:
// random ones, and a learnable synthetic task for the training-run test.
#pragma once

#include <cstdint>
#include <vector>

#include "test_batches.h"
#include "train/dflash_config.h"
#include "train/dflash_model.h"

namespace hsring::train::testing {

// The rows of a drafter batch (test_batches.h) and the blocks' anchors.
struct OwnedDflashBatch : OwnedBatch {
  std::vector<int32_t> anchors;

  DflashBatch view() const { return {OwnedBatch::view(), anchors}; }
};

struct OwnedTargetWeights {
  std::vector<float> embed, lm_head;

  DflashTargetWeights view() const { return {embed, lm_head}; }
};

// A small config for fast tests: K 2 x H 16, `layers` layers, heads 4/2 x 4, inter 24,
// vocab 13, block 4, mask token 12, gamma 2 (so the weights differ visibly).
DflashConfig small_dflash_config(uint32_t layers = 2);

// A random [V, D] embedding and head, uniform in [-1, 1), from seed.
OwnedTargetWeights random_target(const DflashConfig& config, uint64_t seed);

// Random features in [-1, 1), tokens and labels uniform over the vocabulary (every
// `ignore_every`-th label ignored, from index 1), positions restarting at 0 per document,
// and `anchors` sampled with sample_anchors(seed).
OwnedDflashBatch random_dflash_batch(const DflashConfig& config, std::vector<int32_t> doc_offsets,
                                     size_t anchors, uint64_t seed, size_t ignore_every = 5);

// A task the drafter can learn: each document follows the chain t -> (5 t + 3) mod V from a
// random first token, labels are the next token (the last row's ignored), and the features
// are a fixed random code of the row's token plus a little noise.
OwnedDflashBatch synthetic_dflash_batch(const DflashConfig& config,
                                        std::vector<int32_t> doc_offsets, size_t anchors,
                                        uint64_t seed);

}  // namespace hsring::train::testing
