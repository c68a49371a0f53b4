#include "data/data_error.h"

namespace hsring::data {

const char* to_string(DataErrc code) {
  switch (code) {
    case DataErrc::kIo:
      return "i/o error";
    case DataErrc::kForeign:
      return "not a token shard";
    case DataErrc::kBadVersion:
      return "unsupported shard version";
    case DataErrc::kBadHeader:
      return "bad shard header";
    case DataErrc::kTruncated:
      return "truncated shard";
    case DataErrc::kTrailingBytes:
      return "trailing bytes after shard";
    case DataErrc::kChecksum:
      return "checksum mismatch";
    case DataErrc::kBadOffsets:
      return "bad document offsets";
    case DataErrc::kBadToken:
      return "token out of range";
    case DataErrc::kBadMask:
      return "bad loss mask";
    case DataErrc::kEmptyCorpus:
      return "empty corpus";
    case DataErrc::kBadOptions:
      return "bad data options";
  }
  return "unknown data error";
}

DataError::DataError(DataErrc code, const std::string& path, uint64_t offset,
                     const std::string& what)
    : std::runtime_error(path + ": byte " + std::to_string(offset) + ": " + what),
      code_(code),
      path_(path),
      offset_(offset) {}

DataError::DataError(DataErrc code, const std::string& what)
    : std::runtime_error(what), code_(code) {}

}  // namespace hsring::data
