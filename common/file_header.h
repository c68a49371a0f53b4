// The frame hsring's binary files share, token shards (docs/data-format.md) and checkpoints
// (docs/checkpoint-format.md): a 64-byte little-endian header that opens with an 8-byte magic
// and a u32 version and ends with the CRC-32 of the bytes before it, and a file size the
// header gives. Both formats check their frames here, in one order and one wording; each
// checks its own versions and fields.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/error.h"

namespace hsring {

inline constexpr uint32_t kFileHeaderSize = 64;
inline constexpr uint32_t kFileVersionOffset = 8;
inline constexpr uint32_t kFileHeaderCrcOffset = 60;  // CRC-32 of bytes [0, 60)

// Little-endian fields (the formats are little-endian on disk, and so is every host hsring
// builds for: the formats static_assert it).
template <class T>
T load_le(const std::byte* at) {
  T value;
  std::memcpy(&value, at, sizeof value);
  return value;
}

template <class T>
void store_le(std::byte* at, T value) {
  std::memcpy(at, &value, sizeof value);
}

struct FileFormat {
  Errc code;                  // its errors' code: Errc::kData, Errc::kCheckpoint
  std::array<char, 8> magic;  // "HSRTOKNS"
  const char* name;           // "an hsring token shard"
  const char* foreign_hint;   // after a foreign file's message: "" or "; move the file ..."
  const char* cut_short;      // why a file ends early: "" or "the write of ... was cut short"
  const char* damaged;        // after a header checksum mismatch: "" or ": the header is ..."
};

// The magic over the bytes there are, then a whole header. A short file that starts with the
// magic is truncated; any other file is foreign, at the first byte that differs. Returns the
// header's version, for the format to check before the checksum (another version may lay its
// header out differently).
uint32_t check_file_magic(const FileFormat& format, const std::byte* bytes, size_t available,
                          const std::string& path);
// The header's stored CRC-32 against its bytes before it.
void check_file_header_crc(const FileFormat& format, const std::byte* bytes,
                           const std::string& path);
// The file's size against the one its header gives: truncated at the byte where the file
// ends, or trailing bytes past the end.
void check_file_size(const FileFormat& format, uint64_t file_size, uint64_t expected,
                     const std::string& path);

}  // namespace hsring
