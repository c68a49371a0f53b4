#include "common/regular_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>

#include "common/syscheck.h"

namespace hsring {

namespace {

RegularFileOpen refused(int error, std::string problem) {
  return RegularFileOpen{-1, error, std::move(problem)};
}

std::string not_regular(mode_t mode) { return file_type_name(mode) + ", not a regular file"; }

}  // namespace

std::string file_type_name(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a special file";
}

RegularFileOpen try_open_regular_file(const std::string& path, int flags, mode_t mode) {
  // A look before opening keeps a device from being opened at all (opening some has effects);
  // the fstat below is what decides. With O_NOFOLLOW a symlink is left to open(), whose ELOOP
  // the caller may name.
  const bool follow = (flags & O_NOFOLLOW) == 0;
  struct stat st {};
  const int looked = follow ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st);
  if (looked == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
    return refused(0, not_regular(st.st_mode));
  const int fd = ::open(path.c_str(), flags | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, mode);
  if (fd < 0) {
    const int error = errno;
    // ENXIO: a FIFO opened for writing without a reader; EISDIR: a folder opened for writing.
    if ((error == ENXIO || error == EISDIR) && ::stat(path.c_str(), &st) == 0 &&
        !S_ISREG(st.st_mode))
      return refused(0, not_regular(st.st_mode));
    return refused(error, errno_text(error));
  }
  std::string problem;
  int error = 0;
  if (::fstat(fd, &st) != 0) {
    error = errno;
    problem = fmt::format("fstat: {}", errno_text(error));
  } else if (!S_ISREG(st.st_mode)) {
    problem = not_regular(st.st_mode);
  } else if (const int now = ::fcntl(fd, F_GETFL);
             now < 0 || ::fcntl(fd, F_SETFL, now & ~O_NONBLOCK) != 0) {
    error = errno;
    problem = fmt::format("fcntl: {}", errno_text(error));
  }
  if (problem.empty()) return RegularFileOpen{fd, 0, ""};
  ::close(fd);
  return refused(error, std::move(problem));
}

int open_regular_file(const std::string& path, Errc code, int flags, mode_t mode) {
  RegularFileOpen opened = try_open_regular_file(path, flags, mode);
  if (opened.fd >= 0) return opened.fd;
  if (opened.error == 0) opened.problem += ": give the path of a regular file";
  if (opened.error == ENOENT) opened.problem = "no such file";
  throw Error(code, path, "cannot open: " + opened.problem);
}

std::string read_regular_file(const std::string& path, Errc code, size_t max_bytes) {
  const int fd = open_regular_file(path, code);
  const auto fail = [&](const std::string& what) {
    ::close(fd);
    throw Error(code, path, what);
  };
  const auto fail_call = [&](const char* call) {
    const int err = errno;
    ::close(fd);
    throw sys_error(code, err, path, call);
  };
  const auto too_large = [&](const std::string& size) {
    fail(
        fmt::format("it is {} bytes, more than the {} a file of this kind can need: is it the "
                    "right file?",
                    size, max_bytes));
  };
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail_call("fstat");
  if (uint64_t(st.st_size) > max_bytes) too_large(std::to_string(st.st_size));
  // Read to the end rather than st_size bytes, and never past max_bytes: a file that
  // grows while it is read is still bounded.
  std::string text;
  text.reserve(size_t(st.st_size));
  char buffer[65536];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_call("read");
    if (n == 0) break;
    if (text.size() + size_t(n) > max_bytes) too_large(fmt::format("over {}", max_bytes));
    text.append(buffer, size_t(n));
  }
  ::close(fd);
  return text;
}

}  // namespace hsring
