#include "model/target_model.h"

#include <string>

#include "common/error.h"

namespace hsring {

namespace {

[[noreturn]] void bad_input(const std::string& what) {
  throw Error(Errc::kModelBadInput, "bad batch: " + what);
}

}  // namespace

void validate_batch(const PackedBatch& b, const ModelConfig& config) {
  const size_t t = b.tokens.size();
  if (t == 0) bad_input("no tokens");
  if (t > size_t(INT32_MAX)) bad_input("too many tokens");
  if (b.positions.size() != t)
    bad_input(std::to_string(t) + " tokens but " + std::to_string(b.positions.size()) +
              " positions");
  if (b.doc_offsets.size() < 2) bad_input("document offsets need at least [0, T]");
  if (b.doc_offsets.front() != 0) bad_input("document offsets must start at 0");
  if (size_t(b.doc_offsets.back()) != t || b.doc_offsets.back() < 0)
    bad_input("document offsets end at " + std::to_string(b.doc_offsets.back()) +
              ", not at the token count " + std::to_string(t));
  for (size_t d = 1; d < b.doc_offsets.size(); ++d)
    if (b.doc_offsets[d] <= b.doc_offsets[d - 1])
      bad_input("document offsets must increase: offset " + std::to_string(d) + " is " +
                std::to_string(b.doc_offsets[d]) + " after " +
                std::to_string(b.doc_offsets[d - 1]));
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
      throw Error(Errc::kModelBadInput, "capture layer " + std::to_string(id) + " is outside [0, " +
                                            std::to_string(config.num_layers) + ") of model '" +
                                            config.name + "'");
}

}  // namespace hsring
