#include "launcher/data_preflight.h"

#include <stdexcept>

#include "data/corpus.h"
#include "data/data_error.h"
#include "data/default_corpus.h"

namespace hsring {

void check_target_data(const RunOptions& options, const RingShape& shape) {
  if (!runs_model(options)) return;
  const std::string flag = options.data.empty() ? "the built-in corpus" : "--data " + options.data;
  try {
    // Every token once, here, rather than in each target at each start: a flipped or
    // out-of-vocabulary token is refused before anything runs, naming its shard and byte.
    const data::Corpus corpus = data::open_token_data(options.data, options.verify_data);
    if (std::string problem = data::vocabulary_problem(corpus, shape.vocab_size, options.model);
        !problem.empty())
      throw std::invalid_argument(flag + ": " + problem);
  } catch (const data::DataError& e) {
    throw std::invalid_argument(flag + ": " + e.what());
  }
}

}  // namespace hsring
