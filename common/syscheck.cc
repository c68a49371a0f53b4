#include "common/syscheck.h"

#include <fmt/format.h>

#include <system_error>
#include <utility>

namespace hsring {

std::string errno_text(int err) { return std::generic_category().message(err); }

Error sys_error(Errc code, int err, std::string_view what) {
  return Error(code, fmt::format("{}: {}", what, errno_text(err)));
}

Error sys_error(Errc code, int err, std::string path, std::string_view what) {
  return Error(code, std::move(path), fmt::format("{}: {}", what, errno_text(err)));
}

Error sys_error(Errc code, int err, std::string path, uint64_t offset, std::string_view what) {
  return Error(code, std::move(path), offset, fmt::format("{}: {}", what, errno_text(err)));
}

}  // namespace hsring
