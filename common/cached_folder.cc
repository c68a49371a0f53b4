#include "common/cached_folder.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>

namespace hsring {

namespace fs = std::filesystem;

fs::path cached_folder(const fs::path& dir, const std::function<bool(const fs::path&)>& holds,
                       const std::function<void(const fs::path&)>& build, Errc io) {
  static std::atomic<uint32_t> builds{0};  // two threads of one process stage apart too
  std::error_code ec;
  fs::create_directories(dir.parent_path(), ec);
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (holds(dir)) return dir;
    const fs::path staging =
        dir.parent_path() / ("." + dir.filename().string() + "-" + std::to_string(::getpid()) +
                             "-" + std::to_string(builds.fetch_add(1)) + ".tmp");
    fs::remove_all(staging, ec);
    try {
      build(staging);
    } catch (...) {
      fs::remove_all(staging, ec);
      throw;
    }
    // rename() of a folder onto a non-empty one fails: of racing builders one wins, and
    // the others use its folder; one left broken is removed for the next attempt.
    if (::rename(staging.c_str(), dir.c_str()) == 0) continue;
    fs::remove_all(staging, ec);
    if (!holds(dir)) fs::remove_all(dir, ec);
  }
  if (holds(dir)) return dir;
  throw Error(io, dir.string(), 0, "cannot place this cache folder here");
}

}  // namespace hsring
