#include "train/drafter_batch.h"

#include <fmt/format.h>

#include <string>

#include "common/doc_offsets.h"
#include "common/error.h"

namespace hsring::train {

namespace {

[[noreturn]] void bad_batch(std::string_view batch_name, const std::string& what) {
  throw Error(Errc::kModel, fmt::format("{}: {}", batch_name, what));
}

}  // namespace

void validate_batch_metadata(const DrafterBatch& b, uint32_t vocab_size, bool check_tokens,
                             std::string_view batch_name) {
  const size_t rows = b.tokens.size();
  if (rows == 0) bad_batch(batch_name, "it holds no tokens");
  if (b.positions.size() != rows)
    bad_batch(batch_name, fmt::format("{} positions for {} tokens", b.positions.size(), rows));
  if (b.labels.size() != rows)
    bad_batch(batch_name, fmt::format("{} labels for {} tokens", b.labels.size(), rows));
  if (const std::string problem = doc_partition_problem(b.doc_offsets, rows); !problem.empty())
    bad_batch(batch_name, problem);
  for (size_t t = 0; t < rows; ++t) {
    if (b.positions[t] < 0)
      bad_batch(batch_name, fmt::format("position {} of token {} is negative", b.positions[t], t));
    if (b.labels[t] >= int64_t(vocab_size))
      bad_batch(batch_name, fmt::format("label {} of token {} is outside the vocabulary of {} "
                                        "(negative labels are ignored)",
                                        b.labels[t], t, vocab_size));
    if (check_tokens && (b.tokens[t] < 0 || b.tokens[t] >= int64_t(vocab_size)))
      bad_batch(batch_name, fmt::format("token {} at {} is outside the vocabulary of {}",
                                        b.tokens[t], t, vocab_size));
  }
}

void validate_batch_features(const DrafterBatch& b, uint32_t feature_dim,
                             std::string_view batch_name) {
  const size_t rows = b.tokens.size();
  if (rows > 0 && b.features.size() != rows * size_t(feature_dim))
    bad_batch(batch_name,
              fmt::format("features hold {} values, {} tokens of K*H {} need {}", b.features.size(),
                          rows, feature_dim, rows * size_t(feature_dim)));
}

}  // namespace hsring::train
