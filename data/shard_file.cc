#include "data/shard_file.h"

#include <fmt/format.h>

#include <cstring>

#include "common/crc32.h"
#include "common/error.h"
#include "data/file_io.h"
#include "data/token_codec.h"

namespace hsring::data {

uint64_t max_token_of(const ShardHeader& h) {
  if (h.vocab_size != 0) return uint64_t(h.vocab_size) - 1;
  return h.token_bytes == 4 ? (1ull << 31) - 1 : (1ull << (8 * h.token_bytes)) - 1;
}

ShardInfo read_shard_info(const std::string& path) {
  const File file = File::open_read(path);
  const uint64_t size = file.size();
  std::byte head[kShardHeaderSize];
  const size_t got = file.read_some(head, sizeof head, 0);
  ShardInfo info{path, decode_header(head, got, size, path), {}};
  // decode_header checked the file size, so the table is in the file and its size is
  // bounded by it.
  std::vector<std::byte> table(info.header.offsets_size());
  file.read_exact(table.data(), table.size(), info.header.offsets_offset());
  info.doc_offsets = decode_offsets(table.data(), info.header, path);
  return info;
}

namespace {

uint64_t verify_mask(const File& file, const ShardInfo& shard, const StreamOptions& options) {
  const ShardHeader& h = shard.header;
  uint32_t crc = 0;
  uint64_t counted = 0, at = h.mask_offset();
  stream_file(
      file, h.mask_offset(), h.file_size(), options, [&](const std::byte* bytes, size_t size) {
        crc = crc32_update(crc, bytes, size);
        counted +=
            check_mask_bytes(bytes, size, at - h.mask_offset(), h.token_count, at, shard.path);
        at += size;
      });
  if (crc != h.mask_crc)
    throw Error(Errc::kData, shard.path, h.mask_offset(),
                "loss mask checksum mismatch: the mask is corrupt");
  return counted;
}

}  // namespace

ShardCheck verify_shard_tokens(const ShardInfo& shard, const StreamOptions& options) {
  const ShardHeader& h = shard.header;
  if (options.chunk_bytes % 4 != 0)
    throw Error(Errc::kData, "verify chunk size must be a multiple of 4 bytes");
  const File file = File::open_read(shard.path);
  const uint64_t max_token = max_token_of(h);
  const bool check_values = max_token < (1ull << (8 * h.token_bytes)) - 1;
  uint32_t crc = 0;
  uint64_t at = h.tokens_offset();
  stream_file(file, h.tokens_offset(), h.offsets_offset(), options,
              [&](const std::byte* bytes, size_t size) {
                crc = crc32_update(crc, bytes, size);
                // Chunks are a multiple of every token width, so tokens never straddle.
                const size_t count = size / h.token_bytes;
                const size_t bad =
                    check_values ? find_bad_token(h.token_bytes, bytes, count, max_token) : count;
                if (bad < count) {
                  uint32_t token = 0;
                  std::memcpy(&token, bytes + bad * h.token_bytes, h.token_bytes);
                  throw Error(Errc::kData, shard.path, at + bad * h.token_bytes,
                              fmt::format("token {} is outside the vocabulary of {}", token,
                                          max_token + 1));
                }
                at += size;
              });
  if (crc != h.tokens_crc)
    throw Error(Errc::kData, shard.path, h.tokens_offset(),
                "token checksum mismatch: the tokens are corrupt");
  return ShardCheck{h.has_mask() ? verify_mask(file, shard, options) : h.token_count};
}

}  // namespace hsring::data
