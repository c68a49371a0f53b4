#include "test_batches.h"

#include "common/random.h"
#include "grad_check.h"

namespace hsring::train::testing {

void fill_positions(OwnedBatch& b) {
  const auto rows = size_t(b.doc_offsets.back());
  b.positions.resize(rows);
  for (size_t d = 0; d + 1 < b.doc_offsets.size(); ++d)
    for (int32_t t = b.doc_offsets[d]; t < b.doc_offsets[d + 1]; ++t)
      b.positions[size_t(t)] = t - b.doc_offsets[d];
}

OwnedBatch random_rows(size_t feature_dim, uint32_t vocab_size, std::vector<int32_t> doc_offsets,
                       uint64_t seed, size_t ignore_every) {
  OwnedBatch b;
  b.doc_offsets = std::move(doc_offsets);
  const auto rows = size_t(b.doc_offsets.back());
  b.features = random_floats(rows * feature_dim, seed);
  uint64_t state = mix64(seed ^ 0x5EED);
  b.tokens.resize(rows);
  b.labels.resize(rows);
  for (size_t t = 0; t < rows; ++t) {
    b.tokens[t] = int32_t(splitmix64(state) % vocab_size);
    b.labels[t] = int32_t(splitmix64(state) % vocab_size);
    if (ignore_every && t % ignore_every == 1) b.labels[t] = kIgnoreLabel;
  }
  fill_positions(b);
  return b;
}

OwnedBatch random_batch(const SamePositionConfig& c, std::vector<int32_t> doc_offsets,
                        uint64_t seed, size_t ignore_every) {
  return random_rows(c.feature_dim(), c.vocab_size, std::move(doc_offsets), seed, ignore_every);
}

OwnedBatch synthetic_batch(const SamePositionConfig& c, std::vector<int32_t> doc_offsets,
                           uint64_t seed) {
  OwnedBatch b;
  b.doc_offsets = std::move(doc_offsets);
  const auto rows = size_t(b.doc_offsets.back());
  const size_t fd = c.feature_dim();
  // The code of each token: fixed across batches (its own seed).
  const std::vector<float> code = random_floats(size_t(c.vocab_size) * fd, 0xC0DE);
  const std::vector<float> noise = random_floats(rows * fd, seed ^ 0x401CE, -0.1f, 0.1f);
  uint64_t state = mix64(seed);
  b.tokens.resize(rows);
  b.labels.resize(rows);
  b.features.resize(rows * fd);
  for (size_t t = 0; t < rows; ++t) {
    const auto token = uint32_t(splitmix64(state) % c.vocab_size);
    b.tokens[t] = int32_t(token);
    b.labels[t] =
        splitmix64(state) % 8 == 0 ? kIgnoreLabel : int32_t((token * 5 + 3) % c.vocab_size);
    for (size_t i = 0; i < fd; ++i)
      b.features[t * fd + i] = code[token * fd + i] + noise[t * fd + i];
  }
  fill_positions(b);
  return b;
}

SamePositionConfig small_config(bool embed_tokens) {
  SamePositionConfig c;
  c.num_captured = 2;
  c.target_hidden = 8;
  c.width = 16;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.intermediate_size = 24;
  c.vocab_size = 11;
  c.window = 3;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6;
  c.embed_tokens = embed_tokens;
  return c;
}

}  // namespace hsring::train::testing
