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

const char* to_string(Errc code) {
  switch (code) {
    case Errc::kRingNotFound:
      return "not-found";
    case Errc::kRingExists:
      return "exists";
    case Errc::kRingBadShape:
      return "bad-shape";
    case Errc::kRingProcessBusy:
      return "process-busy";
    case Errc::kRingBadName:
      return "bad-name";
    case Errc::kModelBadConfig:
      return "bad-config";
    case Errc::kApiState:
      return "wrong state";
    case Errc::kApiShape:
      return "bad shape";
    case Errc::kApiUnsupported:
      return "unsupported";
    case Errc::kUsage:
    case Errc::kRing:
    case Errc::kData:
    case Errc::kModel:
    case Errc::kCheckpoint:
    case Errc::kCuda:
    case Errc::kGroup:
    case Errc::kSystem:
      return to_string(layer_of(code));
  }
  return "invalid";
}

}  // namespace hsring
