// Writes a corpus folder: documents into shard-00000.hstok, shard-00001.hstok, ..., a new
// shard opened before a document would take the current one past `shard_tokens`. A
// document never spans shards: one longer than shard_tokens gets a shard of its own.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/shard_writer.h"

namespace hsring::data {

inline constexpr uint64_t kDefaultShardTokens = 1ull << 26;

struct ShardSetSummary {
  std::vector<std::string> shard_paths;
  uint64_t documents = 0;
  uint64_t tokens = 0;
  uint64_t counted = 0;  // tokens the loss mask counts (all of them without masks)
};

class ShardSetWriter {
 public:
  // Creates `dir` if needed. Throws Error (bad options) if it already holds shards, so
  // two writers never mix into one corpus, or if shard_tokens is 0; I/O.
  // REQUIRES: token_bytes and vocab_size as ShardWriter takes them.
  ShardSetWriter(std::string dir, uint32_t token_bytes, uint32_t vocab_size,
                 uint64_t shard_tokens = kDefaultShardTokens);

  // Continues a set a killed writer left in `dir`: its finished shards (shard-00000 ..
  // shard-N-1, each complete, since a shard is renamed into place whole) are kept and
  // counted in the summary, the temporaries of unfinished ones removed, and the next
  // document goes to shard N. Throws Error (bad options) when the shards are not such a
  // sequence or their token width or vocabulary differs; a bad shard's error.
  static ShardSetWriter resume(std::string dir, uint32_t token_bytes, uint32_t vocab_size,
                               uint64_t shard_tokens = kDefaultShardTokens);

  const ShardSetSummary& summary() const { return summary_; }  // so far

  // As ShardWriter::add_document / add_text_document, into the current shard.
  void add_document(std::span<const uint32_t> tokens, std::span<const uint8_t> counted = {});
  void add_text_document(std::string_view text);

  // Finishes the last shard. REQUIRES: called once, last.
  ShardSetSummary finish();

 private:
  struct Resuming {};
  ShardSetWriter(std::string dir, uint32_t token_bytes, uint32_t vocab_size, uint64_t shard_tokens,
                 Resuming);
  ShardWriter& writer_for(uint64_t tokens);

  std::string dir_;
  uint32_t token_bytes_, vocab_size_;
  uint64_t shard_tokens_;
  std::unique_ptr<ShardWriter> writer_;
  ShardSetSummary summary_;
};

// The narrowest token width that holds token ids below `vocab_size`: 1, 2 or 4 bytes.
uint32_t token_bytes_for(uint32_t vocab_size);

}  // namespace hsring::data
