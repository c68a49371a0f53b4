// Files that are not regular files, planted where hsring expects one: a FIFO with nobody
// at its other end (opening or reading it would block forever), a folder, a socket. The
// tests of every reader put one in place of its input and expect a clear error, fast.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

namespace hsring::testing {

// Replaces whatever is at `path` with a FIFO.
inline void plant_fifo(const std::string& path) {
  std::filesystem::remove_all(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << path << ": " << std::strerror(errno);
}

// Replaces whatever is at `path` with a bound (listening-less) Unix socket.
inline void plant_socket(const std::string& path) {
  std::filesystem::remove_all(path);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof address.sun_path) << path;
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0) << path;
  ::close(fd);
}

// Ends the test process with SIGALRM if the scope lasts more than `seconds`: a reader that
// blocks on a FIFO fails its test at once instead of at ctest's timeout.
class HangGuard {
 public:
  explicit HangGuard(unsigned seconds = 20) { ::alarm(seconds); }
  ~HangGuard() { ::alarm(0); }
  HangGuard(const HangGuard&) = delete;
  HangGuard& operator=(const HangGuard&) = delete;
};

}  // namespace hsring::testing
