// The token shard file format, byte for byte (docs/data-format.md): a 64-byte header, the
// tokens, the document offsets, then (version 2, when its flag is set) the loss mask, one
// bit per token. Decoding here is pure: it checks bytes handed to it and throws Error
// naming the file and the byte, so it is safe on any input.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hsring::data {

inline constexpr std::array<char, 8> kShardMagic = {'H', 'S', 'R', 'T', 'O', 'K', 'N', 'S'};
// Version 1 has no flags; version 2 adds them and the optional loss mask. A writer uses
// version 1 for a shard without a mask, so such shards stay readable by older builds.
inline constexpr uint32_t kShardVersionNoMask = 1;
inline constexpr uint32_t kShardVersion = 2;  // the newest this build reads
// Version 2 flag bits; any other bit set is refused (a feature this build does not know).
inline constexpr uint32_t kFlagLossMask = 1u << 0;
inline constexpr uint32_t kKnownFlags = kFlagLossMask;
inline constexpr uint32_t kShardHeaderSize = 64;
inline constexpr char kShardExtension[] = ".hstok";
// Bounds that keep every size computed from a header far from uint64 overflow.
inline constexpr uint64_t kMaxShardTokens = 1ull << 48;
inline constexpr uint64_t kMaxShardDocs = 1ull << 48;

// Field offsets inside the header; the error messages name these bytes.
enum HeaderField : uint32_t {
  kFieldMagic = 0,
  kFieldVersion = 8,
  kFieldHeaderSize = 12,
  kFieldTokenBytes = 16,
  kFieldVocabSize = 20,
  kFieldTokenCount = 24,
  kFieldDocCount = 32,
  kFieldTokensCrc = 40,
  kFieldOffsetsCrc = 44,
  kFieldReserved = 48,   // version 1: 12 bytes, zero
  kFieldFlags = 48,      // version 2: uint32 flags (kFlagLossMask)
  kFieldMaskCrc = 52,    // version 2: CRC-32 of the mask bytes, 0 without a mask
  kFieldReserved2 = 56,  // version 2: 4 bytes, zero
  kFieldHeaderCrc = 60,  // CRC-32 of bytes [0, 60)
};

struct ShardHeader {
  uint32_t version = kShardVersion;
  uint32_t header_size = kShardHeaderSize;
  uint32_t token_bytes = 2;  // 1, 2 or 4: uint8, uint16, uint32 tokens
  uint32_t vocab_size = 0;   // 0: unknown; else every token is < vocab_size
  uint64_t token_count = 0;
  uint64_t doc_count = 0;
  uint32_t tokens_crc = 0;   // CRC-32 of the token bytes
  uint32_t offsets_crc = 0;  // CRC-32 of the offset table bytes
  uint32_t flags = 0;        // version 2 only
  uint32_t mask_crc = 0;     // CRC-32 of the mask bytes (version 2 with kFlagLossMask)

  // Without a mask every token counts as a training target.
  bool has_mask() const { return (flags & kFlagLossMask) != 0; }
  uint64_t tokens_offset() const { return header_size; }
  uint64_t tokens_size() const { return token_count * token_bytes; }
  uint64_t offsets_offset() const { return tokens_offset() + tokens_size(); }
  uint64_t offsets_size() const { return (doc_count + 1) * 8; }
  // The mask: bit t % 8 of byte t / 8 is token t's flag (1: counted); pad bits are zero.
  uint64_t mask_offset() const { return offsets_offset() + offsets_size(); }
  uint64_t mask_size() const { return has_mask() ? (token_count + 7) / 8 : 0; }
  uint64_t file_size() const { return mask_offset() + mask_size(); }
};

// The 64 header bytes for `header`, with the header CRC filled in. REQUIRES: version 1
// with no flags, or version 2.
std::array<std::byte, kShardHeaderSize> encode_header(const ShardHeader& header);

// Decodes the first `available` bytes of `path`, a file of `file_size` bytes, and checks
// that the header is valid and that the file has exactly the size it implies.
// Throws Error (foreign, bad version, checksum, bad header, truncated,
// trailing bytes). Reads versions 1 and 2.
ShardHeader decode_header(const std::byte* bytes, size_t available, uint64_t file_size,
                          const std::string& path);

// Decodes the offset table of `header` (its offsets_size() bytes): checks its CRC, that
// it starts at 0, never decreases and ends at token_count. Throws Error.
std::vector<uint64_t> decode_offsets(const std::byte* bytes, const ShardHeader& header,
                                     const std::string& path);

// Checks `size` bytes of the mask that start at mask byte `first_byte` of a mask of
// `token_count` bits: the bits past the last token must be zero. Returns the number of set
// bits among them. Throws Error (bad mask) naming the byte at `file_offset + i`.
uint64_t check_mask_bytes(const std::byte* bytes, size_t size, uint64_t first_byte,
                          uint64_t token_count, uint64_t file_offset, const std::string& path);

// Bit `bit` of mask bytes `mask` (bit % 8 of byte bit / 8): whether that token counts.
inline bool mask_bit(const std::byte* mask, uint64_t bit) {
  return ((std::to_integer<unsigned>(mask[bit / 8]) >> (bit % 8)) & 1u) != 0;
}

}  // namespace hsring::data
