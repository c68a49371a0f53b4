#include "data/file_io.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/error.h"
#include "common/exclusive_file.h"
#include "common/regular_file.h"
#include "common/syscheck.h"

namespace hsring::data {

namespace {

[[noreturn]] void io_error(const std::string& path, uint64_t offset, const char* call, int err) {
  throw sys_error(Errc::kData, err, path, offset, call);
}

}  // namespace

File File::open_read(const std::string& path) {
  return File(open_regular_file(path, Errc::kData), path);
}

File File::create_temporary_beside(const std::string& final_path) {
  const std::string name = final_path.substr(final_path.find_last_of('/') + 1);
  ExclusiveTemporary t = create_exclusive_temporary(folder_of(final_path), "." + name + ".tmp-");
  if (t.fd < 0) io_error(t.path, 0, "create", t.error);
  return File(t.fd, std::move(t.path));
}

File::File(File&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

uint64_t File::size() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) io_error(path_, 0, "fstat", errno);
  return uint64_t(st.st_size);
}

size_t File::read_some(void* out, size_t size, uint64_t offset) const {
  size_t done = 0;
  while (done < size) {
    const ssize_t n =
        ::pread(fd_, static_cast<char*>(out) + done, size - done, off_t(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) io_error(path_, offset + done, "pread", errno);
    if (n == 0) break;
    done += size_t(n);
  }
  return done;
}

void File::read_exact(void* out, size_t size, uint64_t offset) const {
  const size_t got = read_some(out, size, offset);
  if (got < size)
    throw Error(Errc::kData, path_, offset + got,
                fmt::format("file ends early ({} more bytes expected)", size - got));
}

void File::write_all(const void* bytes, size_t size, uint64_t offset) const {
  size_t done = 0;
  while (done < size) {
    const ssize_t n =
        ::pwrite(fd_, static_cast<const char*>(bytes) + done, size - done, off_t(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) io_error(path_, offset + done, "pwrite", errno);
    done += size_t(n);
  }
}

void File::sync() const {
  if (::fsync(fd_) != 0) io_error(path_, 0, "fsync", errno);
}

}  // namespace hsring::data
