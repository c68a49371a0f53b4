// The one exception type of the token-data layer: a code to branch on, the file and the
// byte offset where the problem is, and a message naming both.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace hsring::data {

enum class DataErrc {
  kIo,             // a system call on the file failed
  kForeign,        // not a token shard (wrong magic)
  kBadVersion,     // a token shard of another format version
  kBadHeader,      // header fields impossible or inconsistent
  kTruncated,      // the file ends before the header says it should
  kTrailingBytes,  // the file is longer than the header says
  kChecksum,       // a CRC-32 does not match the bytes it covers
  kBadOffsets,     // document offsets not 0 .. token_count, non-decreasing
  kBadToken,       // a token outside the vocabulary or beyond int32
  kBadMask,        // a loss mask with bits set past the last token
  kEmptyCorpus,    // no shard, or no token in any shard
  kBadOptions,     // impossible packing or reader options
};
const char* to_string(DataErrc code);

class DataError : public std::runtime_error {
 public:
  // `offset` is the byte of `path` where the problem is; the message says
  // "<path>: byte <offset>: <what>".
  DataError(DataErrc code, const std::string& path, uint64_t offset, const std::string& what);
  // For errors that belong to no file (options, an empty corpus).
  DataError(DataErrc code, const std::string& what);

  DataErrc code() const { return code_; }
  const std::string& path() const { return path_; }
  uint64_t offset() const { return offset_; }

 private:
  DataErrc code_;
  std::string path_;
  uint64_t offset_ = 0;
};

}  // namespace hsring::data
