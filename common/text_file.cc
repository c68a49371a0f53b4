#include "common/text_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>

#include "common/exclusive_file.h"
#include "common/regular_file.h"
#include "common/syscheck.h"

namespace hsring {

namespace {

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

[[noreturn]] void cannot_write(const std::string& path, const std::string& how, int err) {
  throw sys_error(Errc::kSystem, err, fmt::format("cannot write {} ({})", path, how));
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string dir = folder_of(path);
  // The temporary is hidden (a leading dot) so a reader listing the folder, a scraper of
  // *.prom files or systemd, never takes it for a file of its own.
  const ExclusiveTemporary t = create_exclusive_temporary(dir, "." + base_name(path) + ".tmp-");
  if (t.fd < 0) cannot_write(path, "creating a temporary in " + dir, t.error);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(t.fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(t.fd);
      ::unlink(t.path.c_str());
      cannot_write(path, "writing " + t.path, err);
    }
    done += size_t(n);
  }
  // fsync before the rename: after a power loss the name holds the old text or the new,
  // never an empty file.
  int err = ::fsync(t.fd) == 0 ? 0 : errno;
  if (::close(t.fd) != 0 && err == 0) err = errno;
  // rename() replaces whatever has the name, a planted symlink included, without following it.
  if (err == 0 && ::rename(t.path.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(t.path.c_str());
    cannot_write(path, "replacing it with " + t.path, err);
  }
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {  // the rename itself durable; a folder that cannot be opened still has it
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

std::optional<std::string> read_file_if_exists(const std::string& path) {
  const RegularFileOpen opened = try_open_regular_file(path);
  if (opened.fd < 0) {
    if (opened.error == ENOENT) return std::nullopt;
    throw Error(Errc::kSystem, fmt::format("cannot read {}: {}", path, opened.problem));
  }
  const int fd = opened.fd;
  std::string text;
  char buffer[4096];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw sys_error(Errc::kSystem, err, fmt::format("cannot read {}", path));
    }
    text.append(buffer, size_t(n));
  }
  ::close(fd);
  return text;
}

}  // namespace hsring
