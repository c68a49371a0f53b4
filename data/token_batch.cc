#include "data/token_batch.h"

#include <cstring>

#include "data/corpus.h"
#include "data/data_error.h"
#include "data/file_io.h"
#include "data/token_codec.h"

namespace hsring::data {

uint64_t piece_file_offset(const Corpus& corpus, const Piece& piece) {
  const ShardHeader& h = corpus.shards()[piece.shard].header;
  return h.tokens_offset() + piece.begin * h.token_bytes;
}

uint64_t piece_bytes(const Corpus& corpus, const Piece& piece) {
  return uint64_t(piece.length) * corpus.shards()[piece.shard].header.token_bytes;
}

TokenBatch assemble_batch(const Corpus& corpus, const BatchRef& ref, const std::byte* raw) {
  TokenBatch batch;
  batch.batch_id = ref.batch_id;
  batch.epoch = ref.epoch;
  batch.length_bucket = ref.length_bucket;
  batch.tokens.resize(ref.token_count);
  batch.positions.resize(ref.token_count);
  batch.labels.resize(ref.token_count);
  batch.doc_offsets.reserve(ref.pieces.size() + 1);
  batch.doc_offsets.push_back(0);
  uint32_t at = 0;
  for (const Piece& piece : ref.pieces) {
    const ShardInfo& shard = corpus.shards()[piece.shard];
    const uint32_t width = shard.header.token_bytes;
    // Checked here too, so a corpus opened without token verification still never hands
    // out a token id the model cannot embed.
    const size_t good =
        decode_tokens(width, raw, piece.length, max_token_of(shard.header), &batch.tokens[at]);
    if (good < piece.length) {
      uint32_t token = 0;
      std::memcpy(&token, raw + good * width, width);
      throw DataError(DataErrc::kBadToken, shard.path,
                      piece_file_offset(corpus, piece) + uint64_t(good) * width,
                      "token " + std::to_string(token) + " is outside the vocabulary of " +
                          std::to_string(max_token_of(shard.header) + 1));
    }
    raw += uint64_t(piece.length) * width;
    for (uint32_t i = 0; i < piece.length; ++i) batch.positions[at + i] = int32_t(i);
    for (uint32_t i = 0; i + 1 < piece.length; ++i) batch.labels[at + i] = batch.tokens[at + i + 1];
    batch.labels[at + piece.length - 1] = kIgnoreLabel;
    at += piece.length;
    batch.doc_offsets.push_back(int32_t(at));
  }
  return batch;
}

bool copy_to_slot_arrays(const TokenBatch& batch, uint32_t max_tokens, int32_t* tokens,
                         int32_t* positions, int32_t* doc_offsets, int32_t* labels) {
  const size_t n = batch.tokens.size();
  if (n > max_tokens) return false;
  std::memcpy(tokens, batch.tokens.data(), n * sizeof(int32_t));
  std::memcpy(positions, batch.positions.data(), n * sizeof(int32_t));
  std::memcpy(labels, batch.labels.data(), n * sizeof(int32_t));
  std::memcpy(doc_offsets, batch.doc_offsets.data(), batch.doc_offsets.size() * sizeof(int32_t));
  return true;
}

TokenBatch read_batch(const Corpus& corpus, const BatchIndex& index, uint64_t batch_id) {
  const BatchRef ref = index.batch(batch_id);
  uint64_t total = 0;
  for (const Piece& p : ref.pieces) total += piece_bytes(corpus, p);
  std::vector<std::byte> raw(total);
  uint64_t at = 0;
  for (const Piece& p : ref.pieces) {
    const File file = File::open_read(corpus.shards()[p.shard].path);
    file.read_exact(raw.data() + at, piece_bytes(corpus, p), piece_file_offset(corpus, p));
    at += piece_bytes(corpus, p);
  }
  return assemble_batch(corpus, ref, raw.data());
}

}  // namespace hsring::data
