#include "model/model_error.h"

namespace hsring {

const char* to_string(ModelErrc code) {
  switch (code) {
    case ModelErrc::kIo:
      return "io";
    case ModelErrc::kBadJson:
      return "bad-json";
    case ModelErrc::kBadConfig:
      return "bad-config";
    case ModelErrc::kBadFile:
      return "bad-file";
    case ModelErrc::kMissingTensor:
      return "missing-tensor";
    case ModelErrc::kBadTensor:
      return "bad-tensor";
    case ModelErrc::kBadInput:
      return "bad-input";
  }
  return "invalid";
}

}  // namespace hsring
