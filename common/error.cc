#include "common/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace hsring {

Error::Error(Errc code, std::string_view what) : Error(code, what, 0) {}

Error::Error(Errc code, std::string_view what, int64_t detail)
    : std::runtime_error(""),
      code_(code),
      detail_(detail),
      state_(std::make_shared<State>(State{std::string(what), ""})) {}

Error::Error(Errc code, std::string path, uint64_t offset, std::string_view what)
    : std::runtime_error(""),
      code_(code),
      offset_(offset),
      state_(std::make_shared<State>(
          State{fmt::format("{}: byte {}: {}", path, offset, what), std::move(path)})) {}

Error::Error(Errc code, std::string path, std::string_view what)
    : std::runtime_error(""),
      code_(code),
      state_(std::make_shared<State>(State{fmt::format("{}: {}", path, what), std::move(path)})) {}

void Error::prepend(std::string_view context) {
  state_ =
      std::make_shared<State>(State{fmt::format("{}{}", context, state_->message), state_->path});
}

ErrorClass layer_of(Errc code) {
  // ErrorClass values are the hundreds digits of their codes' ranges; 8 and up: system.
  return ErrorClass(std::min(int(code) / 100, int(ErrorClass::kSystem)));
}

const char* to_string(ErrorClass layer) {
  switch (layer) {
    case ErrorClass::kUsage:
      return "usage";
    case ErrorClass::kRing:
      return "ring";
    case ErrorClass::kData:
      return "data";
    case ErrorClass::kModel:
      return "model";
    case ErrorClass::kCheckpoint:
      return "checkpoint";
    case ErrorClass::kCuda:
      return "cuda";
    case ErrorClass::kGroup:
      return "group";
    case ErrorClass::kApi:
      return "api";
    case ErrorClass::kSystem:
      return "system";
  }
  return "invalid";
}

// Each layer's names as that layer had them: messages and `data inspect` print them.
const char* to_string(Errc code) {
  switch (code) {
    case Errc::kUsage:
      return "usage";
    case Errc::kRingNotFound:
      return "not-found";
    case Errc::kRingExists:
      return "exists";
    case Errc::kRingForeignOwner:
      return "foreign-owner";
    case Errc::kRingPermission:
      return "permission";
    case Errc::kRingBadMagic:
      return "bad-magic";
    case Errc::kRingBadVersion:
      return "bad-version";
    case Errc::kRingBadLayout:
      return "bad-layout";
    case Errc::kRingTruncated:
      return "truncated";
    case Errc::kRingBadShape:
      return "bad-shape";
    case Errc::kRingNoSpace:
      return "no-space";
    case Errc::kRingProcessBusy:
      return "process-busy";
    case Errc::kRingSystem:
      return "system";
    case Errc::kRingBadName:
      return "bad-name";
    case Errc::kRingUnsafeMode:
      return "unsafe-mode";
    case Errc::kDataIo:
      return "i/o error";
    case Errc::kDataForeign:
      return "not a token shard";
    case Errc::kDataBadVersion:
      return "unsupported shard version";
    case Errc::kDataBadHeader:
      return "bad shard header";
    case Errc::kDataTruncated:
      return "truncated shard";
    case Errc::kDataTrailingBytes:
      return "trailing bytes after shard";
    case Errc::kDataChecksum:
      return "checksum mismatch";
    case Errc::kDataBadOffsets:
      return "bad document offsets";
    case Errc::kDataBadToken:
      return "token out of range";
    case Errc::kDataBadMask:
      return "bad loss mask";
    case Errc::kDataEmptyCorpus:
      return "empty corpus";
    case Errc::kDataBadOptions:
      return "bad data options";
    case Errc::kModelIo:
      return "io";
    case Errc::kModelBadJson:
      return "bad-json";
    case Errc::kModelBadConfig:
      return "bad-config";
    case Errc::kModelBadFile:
      return "bad-file";
    case Errc::kModelMissingTensor:
      return "missing-tensor";
    case Errc::kModelBadTensor:
      return "bad-tensor";
    case Errc::kModelBadInput:
      return "bad-input";
    case Errc::kCheckpointIo:
      return "i/o error";
    case Errc::kCheckpointNoSpace:
      return "no space for the checkpoint";
    case Errc::kCheckpointLocked:
      return "checkpoint directory in use";
    case Errc::kCheckpointForeign:
      return "not a checkpoint";
    case Errc::kCheckpointBadVersion:
      return "unsupported checkpoint version";
    case Errc::kCheckpointBadHeader:
      return "bad checkpoint header";
    case Errc::kCheckpointTruncated:
      return "truncated checkpoint";
    case Errc::kCheckpointTrailingBytes:
      return "trailing bytes after checkpoint";
    case Errc::kCheckpointChecksum:
      return "checksum mismatch";
    case Errc::kCheckpointBadTable:
      return "bad checkpoint entry table";
    case Errc::kCheckpointNoValidCheckpoint:
      return "no valid checkpoint";
    case Errc::kCheckpointBadCheckpoint:
      return "checkpoint cannot be written";
    case Errc::kCuda:
      return "cuda";
    case Errc::kGroupFile:
      return "bad group file";
    case Errc::kGroupRendezvous:
      return "group rendezvous";
    case Errc::kApiState:
      return "wrong state";
    case Errc::kApiShape:
      return "bad shape";
    case Errc::kApiUnsupported:
      return "unsupported";
    case Errc::kSystem:
      return "system";
    case Errc::kInternal:
      return "internal";
  }
  return "invalid";
}

}  // namespace hsring
