// Packed drafter batches that own their data, for the tests: random ones and the learnable
// synthetic task of the training-run tests.
#pragma once

#include <cstdint>
#include <vector>

#include "train/drafter_batch.h"
#include "train/same_position_config.h"

namespace hsring::train::testing {

struct OwnedBatch {
  std::vector<float> features;
  std::vector<int32_t> tokens, positions, doc_offsets, labels;

  DrafterBatch view() const { return {features, tokens, positions, doc_offsets, labels}; }
};

// Random features in [-1, 1), tokens and labels uniform over the vocabulary, positions
// restarting at 0 in each document, every `ignore_every`-th label (from index 1) ignored.
// Random features, tokens and labels for the documents `doc_offsets` delimits (each label
// at a row r with r % ignore_every == 1 ignored; 0: none), positions counted from each
// document's start. The rows of both drafters' random batches.
OwnedBatch random_rows(size_t feature_dim, uint32_t vocab_size, std::vector<int32_t> doc_offsets,
                       uint64_t seed, size_t ignore_every);
// Sets b.positions from b.doc_offsets: 0, 1, ... within each document.
void fill_positions(OwnedBatch& b);

OwnedBatch random_batch(const SamePositionConfig& config, std::vector<int32_t> doc_offsets,
                        uint64_t seed, size_t ignore_every = 5);

// A task the drafter can learn: the label is a fixed permutation of the input token, and
// the features are a fixed random code of that token plus a little noise (so the mapping
// goes through fc, the decoder layer and the head). One label in eight is ignored.
OwnedBatch synthetic_batch(const SamePositionConfig& config, std::vector<int32_t> doc_offsets,
                           uint64_t seed);

// A small config for fast tests: K 2 x H 8 -> D 16, heads 4/2 x 4, inter 24, vocab 11,
// window 3.
SamePositionConfig small_config(bool embed_tokens = false);

}  // namespace hsring::train::testing
