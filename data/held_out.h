// The held-out documents of a token-shard corpus given as --data: its last
// held_out_document_count(doc_count) documents (shard order, then document order), which
// the targets never read, so a run can end by evaluating its drafter on documents of its
// own data that it never trained on (docs/data-format.md, "Held-out documents"). The
// built-in corpus has its own split (data/default_corpus.h).
#pragma once

#include <cstdint>
#include <vector>

namespace hsring::data {

class Corpus;

inline constexpr uint64_t kHeldOutFraction = 16;      // one document in 16 ...
inline constexpr uint64_t kMaxHeldOutDocuments = 64;  // ... at most this many

// min(kMaxHeldOutDocuments, doc_count / kHeldOutFraction): none of a corpus of fewer than
// 16 documents.
uint64_t held_out_document_count(uint64_t doc_count);

// The global index (over the whole corpus, shard order) of the first held-out document.
uint64_t first_held_out_document(const Corpus& corpus);

// Each shard's offset table without the held-out documents: what the batch index packs.
std::vector<std::vector<uint64_t>> training_doc_offsets(const Corpus& corpus);
// Each shard's offset table of the held-out documents only (empty tables, {o}, for shards
// with none): a batch index over these packs nothing but held-out documents.
std::vector<std::vector<uint64_t>> held_out_doc_offsets(const Corpus& corpus);

}  // namespace hsring::data
