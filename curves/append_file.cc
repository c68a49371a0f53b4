#include "curves/append_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/regular_file.h"
#include "common/syscheck.h"

namespace hsring::curves {

AppendFile::AppendFile(std::string path) : path_(std::move(path)) {
  // A FIFO planted at the name would block open() and every write (common/regular_file.h).
  const RegularFileOpen opened = try_open_regular_file(path_, O_WRONLY | O_APPEND | O_CREAT);
  fd_ = opened.fd;
  if (fd_ < 0)
    throw Error(Errc::kCheckpoint, path_,
                "cannot open for appending: " + opened.problem +
                    " (check the run folder's permissions, or give another --run-dir)");
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

AppendFile::AppendFile(AppendFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_) {
  other.fd_ = -1;
}

void AppendFile::append(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      const bool full = e == ENOSPC || e == EDQUOT || e == EFBIG;
      throw Error(
          Errc::kCheckpoint, path_,
          fmt::format(
              "cannot append: {}{}", errno_text(e),
              full ? " (free space on its file system, or raise the file-size limit)" : ""));
    }
    bytes.remove_prefix(size_t(n));
  }
}

}  // namespace hsring::curves
