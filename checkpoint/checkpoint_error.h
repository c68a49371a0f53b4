// The one exception type of the checkpoint layer: a code to branch on, the file (or
// directory) and the byte offset where the problem is, and a message that names them and
// says what to do.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace hsring::checkpoint {

enum class CheckpointErrc {
  kIo,                 // a system call on the file or directory failed
  kNoSpace,            // the file system is full, a quota or a file size limit was hit
  kLocked,             // another writer holds the checkpoint directory
  kForeign,            // not an hsring checkpoint (wrong magic)
  kBadVersion,         // a checkpoint of another format version
  kBadHeader,          // header fields impossible or inconsistent
  kTruncated,          // the file ends before the header says it should
  kTrailingBytes,      // the file is longer than the header says
  kChecksum,           // a CRC-32 does not match the bytes it covers
  kBadTable,           // a metadata or tensor entry is impossible or inconsistent
  kNoValidCheckpoint,  // checkpoint files exist but none of them is valid
  kBadCheckpoint,      // a Checkpoint value that cannot be written (duplicate names, ...)
};
const char* to_string(CheckpointErrc code);

class CheckpointError : public std::runtime_error {
 public:
  // `offset` is the byte of `path` where the problem is; the message says
  // "<path>: byte <offset>: <what>".
  CheckpointError(CheckpointErrc code, const std::string& path, uint64_t offset,
                  const std::string& what);
  // For errors about a whole file or directory; the message says "<path>: <what>".
  CheckpointError(CheckpointErrc code, const std::string& path, const std::string& what);

  CheckpointErrc code() const { return code_; }
  const std::string& path() const { return path_; }
  uint64_t offset() const { return offset_; }

 private:
  CheckpointErrc code_;
  std::string path_;
  uint64_t offset_ = 0;
};

}  // namespace hsring::checkpoint
