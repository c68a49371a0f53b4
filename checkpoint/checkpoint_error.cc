#include "checkpoint/checkpoint_error.h"

namespace hsring::checkpoint {

const char* to_string(CheckpointErrc code) {
  switch (code) {
    case CheckpointErrc::kIo:
      return "i/o error";
    case CheckpointErrc::kNoSpace:
      return "no space for the checkpoint";
    case CheckpointErrc::kLocked:
      return "checkpoint directory in use";
    case CheckpointErrc::kForeign:
      return "not a checkpoint";
    case CheckpointErrc::kBadVersion:
      return "unsupported checkpoint version";
    case CheckpointErrc::kBadHeader:
      return "bad checkpoint header";
    case CheckpointErrc::kTruncated:
      return "truncated checkpoint";
    case CheckpointErrc::kTrailingBytes:
      return "trailing bytes after checkpoint";
    case CheckpointErrc::kChecksum:
      return "checksum mismatch";
    case CheckpointErrc::kBadTable:
      return "bad checkpoint entry table";
    case CheckpointErrc::kNoValidCheckpoint:
      return "no valid checkpoint";
    case CheckpointErrc::kBadCheckpoint:
      return "checkpoint cannot be written";
  }
  return "unknown checkpoint error";
}

CheckpointError::CheckpointError(CheckpointErrc code, const std::string& path, uint64_t offset,
                                 const std::string& what)
    : std::runtime_error(path + ": byte " + std::to_string(offset) + ": " + what),
      code_(code),
      path_(path),
      offset_(offset) {}

CheckpointError::CheckpointError(CheckpointErrc code, const std::string& path,
                                 const std::string& what)
    : std::runtime_error(path + ": " + what), code_(code), path_(path) {}

}  // namespace hsring::checkpoint
