#include "dflash_batches.h"

#include "common/random.h"
#include "grad_check.h"
#include "train/dflash_blocks.h"

namespace hsring::train::testing {

DflashConfig small_dflash_config(uint32_t layers) {
  DflashConfig c;
  c.num_captured = 2;
  c.target_hidden = 16;
  c.num_layers = layers;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.intermediate_size = 24;
  c.vocab_size = 13;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6;
  c.block_size = 4;
  c.mask_token_id = 12;
  c.loss_gamma = 2.0;
  return c;
}

OwnedTargetWeights random_target(const DflashConfig& c, uint64_t seed) {
  const size_t n = size_t(c.vocab_size) * c.width();
  return {random_floats(n, seed), random_floats(n, seed ^ 0x4EAD)};
}

OwnedDflashBatch random_dflash_batch(const DflashConfig& c, std::vector<int32_t> doc_offsets,
                                     size_t anchors, uint64_t seed, size_t ignore_every) {
  OwnedDflashBatch b{
      random_rows(c.feature_dim(), c.vocab_size, std::move(doc_offsets), seed, ignore_every)};
  b.anchors = sample_anchors(b.doc_offsets, b.labels, c.block_size, anchors, seed);
  return b;
}

OwnedDflashBatch synthetic_dflash_batch(const DflashConfig& c, std::vector<int32_t> doc_offsets,
                                        size_t anchors, uint64_t seed) {
  OwnedDflashBatch b;
  b.doc_offsets = std::move(doc_offsets);
  const auto rows = size_t(b.doc_offsets.back());
  const size_t fd = c.feature_dim();
  const std::vector<float> code = random_floats(size_t(c.vocab_size) * fd, 0xC0DE);
  const std::vector<float> noise = random_floats(rows * fd, seed ^ 0x401CE, -0.1f, 0.1f);
  uint64_t state = mix64(seed);
  b.tokens.resize(rows);
  b.labels.resize(rows);
  b.features.resize(rows * fd);
  // The mask token never occurs in the data: the chain runs over the other V - 1 tokens.
  const uint32_t v = c.vocab_size - 1;
  for (size_t d = 0; d + 1 < b.doc_offsets.size(); ++d) {
    auto token = uint32_t(splitmix64(state) % v);
    for (auto t = size_t(b.doc_offsets[d]); t < size_t(b.doc_offsets[d + 1]); ++t) {
      const uint32_t next = (token * 5 + 3) % v;
      b.tokens[t] = int32_t(token);
      b.labels[t] = t + 1 < size_t(b.doc_offsets[d + 1]) ? int32_t(next) : kIgnoreLabel;
      for (size_t i = 0; i < fd; ++i)
        b.features[t * fd + i] = code[token * fd + i] + noise[t * fd + i];
      token = next;
    }
  }
  fill_positions(b);
  b.anchors = sample_anchors(b.doc_offsets, b.labels, c.block_size, anchors, seed);
  return b;
}

}  // namespace hsring::train::testing
