#include "data/shard_format.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "common/crc32.h"
#include "common/error.h"
#include "common/file_header.h"

namespace hsring::data {

static_assert(std::endian::native == std::endian::little, "shards are little-endian on disk");
static_assert(kShardHeaderSize == kFileHeaderSize && kFieldVersion == kFileVersionOffset &&
              kFieldHeaderCrc == kFileHeaderCrcOffset);

namespace {

constexpr FileFormat kShardFormat{Errc::kData, kShardMagic, "an hsring token shard", "", "", ""};

[[noreturn]] void fail(Errc code, const std::string& path, uint64_t offset,
                       const std::string& what) {
  throw Error(code, path, offset, what);
}

}  // namespace

std::array<std::byte, kShardHeaderSize> encode_header(const ShardHeader& h) {
  std::array<std::byte, kShardHeaderSize> out{};
  std::memcpy(out.data(), kShardMagic.data(), kShardMagic.size());
  store_le(out.data() + kFieldVersion, h.version);
  store_le(out.data() + kFieldHeaderSize, h.header_size);
  store_le(out.data() + kFieldTokenBytes, h.token_bytes);
  store_le(out.data() + kFieldVocabSize, h.vocab_size);
  store_le(out.data() + kFieldTokenCount, h.token_count);
  store_le(out.data() + kFieldDocCount, h.doc_count);
  store_le(out.data() + kFieldTokensCrc, h.tokens_crc);
  store_le(out.data() + kFieldOffsetsCrc, h.offsets_crc);
  if (h.version >= 2) {
    store_le(out.data() + kFieldFlags, h.flags);
    store_le(out.data() + kFieldMaskCrc, h.mask_crc);
  }
  store_le(out.data() + kFieldHeaderCrc, crc32(out.data(), kFieldHeaderCrc));
  return out;
}

ShardHeader decode_header(const std::byte* bytes, size_t available, uint64_t file_size,
                          const std::string& path) {
  ShardHeader h;
  h.version = check_file_magic(kShardFormat, bytes, available, path);
  if (h.version != kShardVersionNoMask && h.version != kShardVersion)
    fail(Errc::kData, path, kFieldVersion,
         fmt::format("format version {}, this build reads versions 1 and {}", h.version,
                     kShardVersion));
  check_file_header_crc(kShardFormat, bytes, path);

  h.header_size = load_le<uint32_t>(bytes + kFieldHeaderSize);
  h.token_bytes = load_le<uint32_t>(bytes + kFieldTokenBytes);
  h.vocab_size = load_le<uint32_t>(bytes + kFieldVocabSize);
  h.token_count = load_le<uint64_t>(bytes + kFieldTokenCount);
  h.doc_count = load_le<uint64_t>(bytes + kFieldDocCount);
  h.tokens_crc = load_le<uint32_t>(bytes + kFieldTokensCrc);
  h.offsets_crc = load_le<uint32_t>(bytes + kFieldOffsetsCrc);

  if (h.header_size != kShardHeaderSize)
    fail(Errc::kData, path, kFieldHeaderSize,
         fmt::format("header size {}, versions 1 and 2 have 64", h.header_size));
  if (h.token_bytes != 1 && h.token_bytes != 2 && h.token_bytes != 4)
    fail(Errc::kData, path, kFieldTokenBytes,
         fmt::format("token width {} bytes (1, 2 or 4 expected)", h.token_bytes));
  // Tokens become int32 in a batch: a vocabulary must fit the width and int32.
  const uint64_t width_limit = h.token_bytes == 4 ? (1ull << 31) : (1ull << (8 * h.token_bytes));
  if (h.vocab_size > width_limit)
    fail(Errc::kData, path, kFieldVocabSize,
         fmt::format("vocabulary of {} does not fit {}-byte tokens and int32", h.vocab_size,
                     h.token_bytes));
  if (h.token_count > kMaxShardTokens)
    fail(Errc::kData, path, kFieldTokenCount, "impossible token count");
  if (h.doc_count > kMaxShardDocs)
    fail(Errc::kData, path, kFieldDocCount, "impossible document count");
  if (h.version >= 2) {
    h.flags = load_le<uint32_t>(bytes + kFieldFlags);
    h.mask_crc = load_le<uint32_t>(bytes + kFieldMaskCrc);
    if ((h.flags & ~kKnownFlags) != 0)
      fail(Errc::kData, path, kFieldFlags,
           fmt::format("unknown flag bits {} (this build knows bit 0, the loss mask)",
                       h.flags & ~kKnownFlags));
    if (!h.has_mask() && h.mask_crc != 0)
      fail(Errc::kData, path, kFieldMaskCrc, "mask checksum set without a loss mask");
  }
  const uint32_t reserved_from = h.version >= 2 ? kFieldReserved2 : kFieldReserved;
  for (uint32_t i = reserved_from; i < kFieldHeaderCrc; ++i)
    if (bytes[i] != std::byte{0}) fail(Errc::kData, path, i, "reserved byte not zero");

  check_file_size(kShardFormat, file_size, h.file_size(), path);
  return h;
}

std::vector<uint64_t> decode_offsets(const std::byte* bytes, const ShardHeader& h,
                                     const std::string& path) {
  const uint64_t base = h.offsets_offset();
  if (crc32(bytes, h.offsets_size()) != h.offsets_crc)
    fail(Errc::kData, path, base, "document offset table checksum mismatch");
  std::vector<uint64_t> offsets(h.doc_count + 1);
  for (uint64_t i = 0; i <= h.doc_count; ++i) {
    offsets[i] = load_le<uint64_t>(bytes + 8 * i);
    const bool ok = i == 0 ? offsets[0] == 0 : offsets[i] >= offsets[i - 1];
    if (!ok || offsets[i] > h.token_count)
      fail(Errc::kData, path, base + 8 * i,
           fmt::format("document offset {} is {} (offsets run from 0, never decrease, end at "
                       "the token count)",
                       i, offsets[i]));
  }
  if (offsets.back() != h.token_count)
    fail(Errc::kData, path, base + 8 * h.doc_count,
         fmt::format("last document offset {} is not the token count {}", offsets.back(),
                     h.token_count));
  return offsets;
}

uint64_t check_mask_bytes(const std::byte* bytes, size_t size, uint64_t first_byte,
                          uint64_t token_count, uint64_t file_offset, const std::string& path) {
  uint64_t counted = 0;
  for (size_t i = 0; i < size; ++i) {
    const auto byte = std::to_integer<unsigned>(bytes[i]);
    const uint64_t first_token = (first_byte + i) * 8;
    // Tokens of this byte that exist; the rest are padding and must be zero.
    const uint64_t real =
        token_count > first_token ? std::min<uint64_t>(8, token_count - first_token) : 0;
    const unsigned pad = real == 8 ? 0u : (0xFFu << real) & 0xFFu;
    if ((byte & pad) != 0)
      fail(Errc::kData, path, file_offset + i,
           fmt::format("loss mask bits past the last token ({} tokens) are not zero", token_count));
    counted += uint64_t(std::popcount(byte));
  }
  return counted;
}

}  // namespace hsring::data
