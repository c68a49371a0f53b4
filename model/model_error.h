// The one exception type of model setup and input checking: a code to branch on and a
// message that names the file, the tensor or the field at fault.
#pragma once

#include <stdexcept>
#include <string>

namespace hsring {

enum class ModelErrc {
  kIo,             // a file is missing or cannot be read or mapped
  kBadJson,        // text that is not strict JSON
  kBadConfig,      // a model config that is incomplete, inconsistent or unsupported
  kBadFile,        // a safetensors file or index whose structure is broken or truncated
  kMissingTensor,  // a weight the model needs is in no file
  kBadTensor,      // a weight with the wrong shape or dtype
  kBadInput,       // a batch, a forward request or a ring shape that does not fit the model
};
const char* to_string(ModelErrc code);

class ModelError : public std::runtime_error {
 public:
  ModelError(ModelErrc code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ModelErrc code() const { return code_; }

 private:
  ModelErrc code_;
};

}  // namespace hsring
