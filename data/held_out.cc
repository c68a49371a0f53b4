#include "data/held_out.h"

#include <algorithm>

#include "data/corpus.h"

namespace hsring::data {

uint64_t held_out_document_count(uint64_t doc_count) {
  return std::min(kMaxHeldOutDocuments, doc_count / kHeldOutFraction);
}

uint64_t first_held_out_document(const Corpus& corpus) {
  return corpus.doc_count() - held_out_document_count(corpus.doc_count());
}

std::vector<std::vector<uint64_t>> training_doc_offsets(const Corpus& corpus) {
  uint64_t keep = first_held_out_document(corpus);
  std::vector<std::vector<uint64_t>> out;
  for (const ShardInfo& shard : corpus.shards()) {
    const uint64_t docs = shard.doc_offsets.size() - 1, kept = std::min(keep, docs);
    out.emplace_back(shard.doc_offsets.begin(),
                     shard.doc_offsets.begin() + std::ptrdiff_t(kept + 1));
    keep -= kept;
  }
  return out;
}

std::vector<std::vector<uint64_t>> held_out_doc_offsets(const Corpus& corpus) {
  uint64_t skip = first_held_out_document(corpus);
  std::vector<std::vector<uint64_t>> out;
  for (const ShardInfo& shard : corpus.shards()) {
    const uint64_t docs = shard.doc_offsets.size() - 1, skipped = std::min(skip, docs);
    out.emplace_back(shard.doc_offsets.begin() + std::ptrdiff_t(skipped), shard.doc_offsets.end());
    skip -= skipped;
  }
  return out;
}

}  // namespace hsring::data
