#include "launcher/data_preflight.h"

#include <string>

#include "common/error.h"
#include "data/corpus.h"
#include "data/default_corpus.h"

namespace hsring {

void check_target_data(const RunOptions& options, const RingShape& shape) {
  if (!runs_model(options)) return;
  const std::string flag = options.data.empty() ? "the built-in corpus" : "--data " + options.data;
  std::string problem;
  try {
    // Every token once, here, rather than in each target at each start: a flipped or
    // out-of-vocabulary token is refused before anything runs, naming its shard and byte.
    const data::Corpus corpus = data::open_token_data(options.data, options.verify_data);
    problem = data::vocabulary_problem(corpus, shape.vocab_size, options.model);
  } catch (Error& e) {
    if (e.layer() == ErrorClass::kData) e.prepend(flag + ": ");  // its class stays: exit 2
    throw;
  }
  if (!problem.empty()) throw Error(Errc::kData, flag + ": " + problem);
}

}  // namespace hsring
