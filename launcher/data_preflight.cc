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
    const std::string dir = options.data.empty() ? data::default_corpus_dir() : options.data;
    data::CorpusOptions corpus_options;
    corpus_options.verify_tokens = false;  // headers and offsets now; tokens as batches are built
    const data::Corpus corpus = data::Corpus::open(dir, corpus_options);
    for (const data::ShardInfo& shard : corpus.shards()) {
      const uint32_t vocab = shard.header.vocab_size;
      if (vocab == 0 || vocab > shape.vocab_size)
        throw std::invalid_argument(
            flag + ": shard " + shard.path + " has a vocabulary of " +
            (vocab == 0 ? std::string("unknown size") : std::to_string(vocab)) +
            " but the model '" + options.model + "' has " + std::to_string(shape.vocab_size) +
            " tokens: pack the text with the model's tokenizer (docs/data-format.md)");
    }
  } catch (const data::DataError& e) {
    throw std::invalid_argument(flag + ": " + e.what());
  }
}

}  // namespace hsring
