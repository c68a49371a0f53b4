#include "model/model_text_file.h"

#include "common/error.h"
#include "common/regular_file.h"

namespace hsring {

std::string read_model_text_file(const std::filesystem::path& path, size_t max_bytes) {
  return read_regular_file(path.string(), Errc::kModel, max_bytes);
}

}  // namespace hsring
