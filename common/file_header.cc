#include "common/file_header.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "common/crc32.h"

namespace hsring {

uint32_t check_file_magic(const FileFormat& format, const std::byte* bytes, size_t available,
                          const std::string& path) {
  const std::string_view magic(format.magic.data(), format.magic.size());
  const size_t magic_bytes = std::min(available, magic.size());
  for (size_t i = 0; i < magic_bytes; ++i)
    if (bytes[i] != std::byte(magic[i]))
      throw Error(
          format.code, path, i,
          fmt::format("not {} (magic \"{}\" expected){}", format.name, magic, format.foreign_hint));
  if (available < kFileHeaderSize)
    throw Error(format.code, path, available,
                fmt::format("file ends inside the header ({} bytes expected){}{}", kFileHeaderSize,
                            *format.cut_short ? ": " : "", format.cut_short));
  return load_le<uint32_t>(bytes + kFileVersionOffset);
}

void check_file_header_crc(const FileFormat& format, const std::byte* bytes,
                           const std::string& path) {
  if (crc32(bytes, kFileHeaderCrcOffset) != load_le<uint32_t>(bytes + kFileHeaderCrcOffset))
    throw Error(format.code, path, kFileHeaderCrcOffset,
                fmt::format("header checksum mismatch{}", format.damaged));
}

void check_file_size(const FileFormat& format, uint64_t file_size, uint64_t expected,
                     const std::string& path) {
  if (file_size < expected)
    throw Error(
        format.code, path, file_size,
        fmt::format("file ends early: the header says it has {} bytes{}{}{}", expected,
                    *format.cut_short ? " (" : "", format.cut_short, *format.cut_short ? ")" : ""));
  if (file_size > expected)
    throw Error(
        format.code, path, expected,
        fmt::format("file has {} bytes past the end the header gives", file_size - expected));
}

}  // namespace hsring
