// A corpus: every "*.hstok" shard of one folder, in file-name order, opened and checked.
// The order is part of the corpus's identity: the batch index is a function of it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/file_stream.h"
#include "data/shard_file.h"

namespace hsring::data {

struct CorpusOptions {
  // Also read every token once and check it against the shard's CRC and vocabulary.
  // Costs one sequential read of the corpus per open; without it only headers and offset
  // tables are checked, and token values are still range-checked as batches are built.
  bool verify_tokens = true;
  StreamOptions stream;
};

class Corpus {
 public:
  // Throws Error: I/O (no such folder), empty corpus (no shard, or no token), or the
  // first bad shard's error, naming its file and byte.
  static Corpus open(const std::string& dir, const CorpusOptions& options = {});
  // A corpus of shards already opened (tests, tools); same checks as open() less the I/O.
  static Corpus from_shards(std::string dir, std::vector<ShardInfo> shards);

  const std::string& dir() const { return dir_; }
  const std::vector<ShardInfo>& shards() const { return shards_; }
  uint64_t token_count() const { return token_count_; }
  uint64_t doc_count() const { return doc_count_; }

  // The "*.hstok" files of `dir`, sorted by name. Throws Error (I/O).
  static std::vector<std::string> list_shards(const std::string& dir);

 private:
  std::string dir_;
  std::vector<ShardInfo> shards_;
  uint64_t token_count_ = 0;
  uint64_t doc_count_ = 0;
};

// "" when every shard of `corpus` declares a vocabulary of at most `vocab_size` tokens,
// else which shard does not and what to do (model `model_name` cannot read it).
std::string vocabulary_problem(const Corpus& corpus, uint32_t vocab_size,
                               const std::string& model_name);

}  // namespace hsring::data
