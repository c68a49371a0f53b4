#include "model/target_model.h"

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
    bad_input(std::to_string(t) + " tokens but " + std::to_string(b.positions.size()) +
              " positions");
  if (const std::string problem = doc_partition_problem(b.doc_offsets, t); !problem.empty())
    bad_input(problem);
  for (size_t i = 0; i < t; ++i) {
    if (b.tokens[i] < 0 || uint32_t(b.tokens[i]) >= config.vocab_size)
      bad_input("token " + std::to_string(i) + " is " + std::to_string(b.tokens[i]) +
                ", outside the vocabulary [0, " + std::to_string(config.vocab_size) + ")");
    if (b.positions[i] < 0)
      bad_input("position " + std::to_string(i) + " is negative (" +
                std::to_string(b.positions[i]) + ")");
  }
}

void validate_request(const ForwardRequest& request, const ModelConfig& config) {
  for (int32_t id : request.capture_layers)
    if (id < 0 || uint32_t(id) >= config.num_layers)
      throw Error(Errc::kModel, "capture layer " + std::to_string(id) + " is outside [0, " +
                                    std::to_string(config.num_layers) + ") of model '" +
                                    config.name + "'");
}

}  // namespace hsring
