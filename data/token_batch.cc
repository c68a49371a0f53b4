#include "data/token_batch.h"

#include <fmt/format.h>

#include <cstring>

#include "common/error.h"
#include "data/corpus.h"
#include "data/file_io.h"
#include "data/token_codec.h"

namespace hsring::data {

namespace {

// The mask bytes that hold the bits of tokens [begin, begin + length) of a shard: from
// byte begin / 8 of its mask region.
uint64_t mask_first_byte(const Piece& p) { return p.begin / 8; }
uint64_t mask_bytes(const Piece& p) { return (p.begin + p.length + 7) / 8 - p.begin / 8; }

}  // namespace

std::vector<PieceRead> batch_reads(const Corpus& corpus, const BatchRef& ref) {
  std::vector<PieceRead> reads;
  reads.reserve(2 * ref.pieces.size());
  for (const Piece& p : ref.pieces) {
    const ShardHeader& h = corpus.shards()[p.shard].header;
    reads.push_back({p.shard, h.tokens_offset() + p.begin * h.token_bytes,
                     uint32_t(uint64_t(p.length) * h.token_bytes)});
  }
  for (const Piece& p : ref.pieces) {
    const ShardHeader& h = corpus.shards()[p.shard].header;
    if (h.has_mask())
      reads.push_back({p.shard, h.mask_offset() + mask_first_byte(p), uint32_t(mask_bytes(p))});
  }
  return reads;
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
  // The masks follow every piece's tokens.
  const std::byte* mask = raw;
  for (const Piece& piece : ref.pieces)
    mask += uint64_t(piece.length) * corpus.shards()[piece.shard].header.token_bytes;
  uint32_t at = 0;
  for (const Piece& piece : ref.pieces) {
    const ShardInfo& shard = corpus.shards()[piece.shard];
    const uint32_t width = shard.header.token_bytes;
    const uint64_t offset = shard.header.tokens_offset() + piece.begin * width;
    // Checked here too, so a corpus opened without token verification still never hands
    // out a token id the model cannot embed.
    const size_t good =
        decode_tokens(width, raw, piece.length, max_token_of(shard.header), &batch.tokens[at]);
    if (good < piece.length) {
      uint32_t token = 0;
      std::memcpy(&token, raw + good * width, width);
      throw Error(Errc::kData, shard.path, offset + uint64_t(good) * width,
                  fmt::format("token {} is outside the vocabulary of {}", token,
                              max_token_of(shard.header) + 1));
    }
    raw += uint64_t(piece.length) * width;
    for (uint32_t i = 0; i < piece.length; ++i) batch.positions[at + i] = int32_t(i);
    for (uint32_t i = 0; i + 1 < piece.length; ++i) batch.labels[at + i] = batch.tokens[at + i + 1];
    batch.labels[at + piece.length - 1] = kIgnoreLabel;
    if (shard.header.has_mask()) {
      // Row i predicts token i + 1: it counts when that token does.
      const uint64_t skip = piece.begin % 8;  // bits of the first byte before the piece
      for (uint32_t i = 0; i + 1 < piece.length; ++i)
        if (!mask_bit(mask, skip + i + 1)) batch.labels[at + i] = kIgnoreLabel;
      mask += mask_bytes(piece);
    }
    at += piece.length;
    batch.doc_offsets.push_back(int32_t(at));
  }
  return batch;
}

void mask_target_labels(const TokenBatch& batch, int32_t* labels) {
  for (size_t d = 0; d + 1 < batch.doc_offsets.size(); ++d)
    for (int32_t t = batch.doc_offsets[d]; t + 1 < batch.doc_offsets[d + 1]; ++t)
      if (batch.labels[size_t(t)] == kIgnoreLabel) labels[t] = kIgnoreLabel;
}

bool masks_any_label(const TokenBatch& batch) {
  for (size_t d = 0; d + 1 < batch.doc_offsets.size(); ++d)
    for (int32_t t = batch.doc_offsets[d]; t + 1 < batch.doc_offsets[d + 1]; ++t)
      if (batch.labels[size_t(t)] == kIgnoreLabel) return true;
  return false;
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

TokenBatch read_batch(const Corpus& corpus, const BatchRef& ref) {
  const std::vector<PieceRead> reads = batch_reads(corpus, ref);
  uint64_t total = 0;
  for (const PieceRead& r : reads) total += r.bytes;
  std::vector<std::byte> raw(total);
  uint64_t at = 0;
  for (const PieceRead& r : reads) {
    const File file = File::open_read(corpus.shards()[r.shard].path);
    file.read_exact(raw.data() + at, r.bytes, r.file_offset);
    at += r.bytes;
  }
  return assemble_batch(corpus, ref, raw.data());
}

TokenBatch read_batch(const Corpus& corpus, const BatchIndex& index, uint64_t batch_id) {
  return read_batch(corpus, index.batch(batch_id));
}

}  // namespace hsring::data
