// The corpus hsring uses when no --data is given: original text shipped in data/corpus/,
// compiled into the binary, and packed into byte-level shards on first use.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hsring::data {

struct EmbeddedText {
  const char* name;
  const unsigned char* bytes;
  size_t size;
};

// The texts of data/corpus/, as built into this binary.
std::span<const EmbeddedText> embedded_corpus_texts();

// The built-in documents (a paragraph each, split_documents) fall in two parts: every 16th
// (index 15, 31, ...) is held out, for `hsring eval`; the rest are what targets and the
// pretrained target train on. One rule, so no evaluation prompt was ever trained on.
enum class BuiltinSplit { kTraining, kHeldOut };
bool is_held_out_document(size_t index);
std::vector<std::string_view> builtin_documents(BuiltinSplit split);

// Where packed corpora are kept: $HSRING_CACHE_DIR, else $XDG_CACHE_HOME/hsring, else
// $HOME/.cache/hsring, else /tmp/hsring-<uid>.
std::string default_cache_root();

// The folder of the packed default corpus under `cache_root` ("" for the default root),
// packing it first if it is missing or does not open cleanly. Safe against concurrent
// callers: each packs into a private folder and renames it into place; the loser of a
// race uses the winner's. Throws Error.
std::string default_corpus_dir(const std::string& cache_root = "");
// The same for the held-out documents (BuiltinSplit::kHeldOut).
std::string default_heldout_dir(const std::string& cache_root = "");

class Corpus;

// The token shards a model target reads: `dir`, or the default corpus when it is "".
// Headers and offset tables are checked now; with `verify_tokens` also every token (both
// checksums and the vocabulary: CorpusOptions), else token values as each batch is
// built. The default corpus is always checked in full (default_corpus_dir). Throws
// Error.
Corpus open_token_data(const std::string& dir, bool verify_tokens = false);

}  // namespace hsring::data
