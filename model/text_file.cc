#include "model/text_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <system_error>

#include "common/error.h"

namespace hsring {

std::string read_text_file(const std::filesystem::path& path, size_t max_bytes) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw Error(Errc::kModelIo,
                "cannot read '" + path.string() + "': " +
                    (std::filesystem::exists(path, ec) ? "not a regular file" : "no such file"));
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) throw Error(Errc::kModelIo, "cannot stat '" + path.string() + "': " + ec.message());
  if (size > max_bytes)
    throw Error(Errc::kModelIo, "'" + path.string() + "' is " + std::to_string(size) +
                                    " bytes, more than the " + std::to_string(max_bytes) +
                                    " expected of it");
  std::ifstream in(path, std::ios::binary);
  std::string text(size, '\0');
  if (!in || !in.read(text.data(), std::streamsize(size)))
    throw Error(Errc::kModelIo, "cannot read '" + path.string() + "': " + std::strerror(errno));
  return text;
}

}  // namespace hsring
