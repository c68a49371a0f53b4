#include "model/target_model.h"

#include <fmt/format.h>

#include <string>

#include "common/doc_offsets.h"
#include "common/error.h"

namespace hsring {

namespace {

[[noreturn]] void bad_input(const std::string& what) {
  throw Error(Errc::kModel, "bad batch: " + what);
}

}  // namespace

void validate_batch(const PackedBatch& b, const ModelConfig& config) {
  const size_t t = b.tokens.size();
  if (t == 0) bad_input("no tokens");
  if (t > size_t(INT32_MAX)) bad_input("too many tokens");
  if (b.positions.size() != t)
    bad_input(fmt::format("{} tokens but {} positions", t, b.positions.size()));
  if (const std::string problem = doc_partition_problem(b.doc_offsets, t); !problem.empty())
    bad_input(problem);
  for (size_t i = 0; i < t; ++i) {
    if (b.tokens[i] < 0 || uint32_t(b.tokens[i]) >= config.vocab_size)
      bad_input(fmt::format("token {} is {}, outside the vocabulary [0, {})", i, b.tokens[i],
                            config.vocab_size));
    if (b.positions[i] < 0)
      bad_input(fmt::format("position {} is negative ({})", i, b.positions[i]));
  }
}

void validate_request(const ForwardRequest& request, const ModelConfig& config) {
  for (int32_t id : request.capture_layers)
    if (id < 0 || uint32_t(id) >= config.num_layers)
      throw Error(Errc::kModel, fmt::format("capture layer {} is outside [0, {}) of model '{}'", id,
                                            config.num_layers, config.name));
}

}  // namespace hsring
