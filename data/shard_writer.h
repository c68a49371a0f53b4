// Writes one token shard. The shard appears under its name only once it is complete:
// it is written to "<path>.tmp", synced, then renamed, so a crash leaves no half shard.
// A shard where some token is masked out is version 2 with a loss mask; any other is
// version 1, byte for byte what builds without masks wrote.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/file_io.h"
#include "data/shard_format.h"

namespace hsring::data {

class ShardWriter {
 public:
  // REQUIRES: token_bytes is 1, 2 or 4; vocab_size fits it (0: unknown vocabulary).
  ShardWriter(std::string path, uint32_t token_bytes, uint32_t vocab_size);
  ~ShardWriter();  // an unfinished shard's temporary file is removed
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Appends one document. `counted` is its loss mask, one flag per token (nonzero: the
  // token is a training target), or empty: every token counts. Throws Error (bad token)
  // for a token that does not fit the width or the vocabulary, bad options for a mask of
  // another length; nothing is appended then.
  void add_document(std::span<const uint32_t> tokens, std::span<const uint8_t> counted = {});
  // Appends one document whose tokens are the bytes of `text` (byte-level, vocab 256).
  void add_text_document(std::string_view text);

  uint64_t token_count() const { return header_.token_count; }
  uint64_t doc_count() const { return header_.doc_count; }

  // Writes the offsets and the header, syncs and renames into place.
  void finish();

 private:
  void check_token(uint32_t token) const;
  void append_token(uint32_t token);
  void append_mask(std::span<const uint8_t> counted, uint64_t tokens);
  void flush();

  std::string path_;
  std::string temp_path_;
  File file_;
  ShardHeader header_;
  std::vector<uint64_t> offsets_{0};
  std::vector<std::byte> buffer_;  // token bytes not yet written
  // The mask, bit-packed, of every token so far; kept whole (a shard's tokens / 8 bytes)
  // because it is written after the offsets, and written only if some bit is zero.
  std::vector<uint8_t> mask_;
  bool masked_ = false;  // some token is masked out
  uint64_t written_ = kShardHeaderSize;
  uint64_t token_limit_ = 0;  // every token is below it: the vocabulary, or what fits
  uint32_t tokens_crc_ = 0;
  bool finished_ = false;
};

}  // namespace hsring::data
