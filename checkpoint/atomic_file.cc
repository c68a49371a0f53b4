#include "checkpoint/atomic_file.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "checkpoint/checkpoint_files.h"
#include "checkpoint/write_queue.h"
#include "common/error.h"
#include "common/exclusive_file.h"
#include "common/syscheck.h"

namespace hsring::checkpoint {

namespace {

// "1288490188 bytes (1.19 GiB)": the hundredths are cut, not rounded
std::string bytes_text(uint64_t bytes) {
  std::string text = fmt::format("{} bytes", bytes);
  const auto scaled = [&](uint64_t unit, const char* name) {
    const uint64_t hundredths = bytes / unit * 100 + bytes % unit * 100 / unit;
    const uint64_t fraction = hundredths % 100;
    return fmt::format(" ({}.{:02} {})", hundredths / 100, fraction, name);
  };
  if (bytes >= (1ull << 30)) return text + scaled(1ull << 30, "GiB");
  if (bytes >= (1ull << 20)) return text + scaled(1ull << 20, "MiB");
  return text;
}

bool is_space_error(int error) { return error == ENOSPC || error == EDQUOT || error == EFBIG; }

}  // namespace

AtomicFile::AtomicFile(std::string final_path, uint64_t size, const WriteOptions& options)
    : final_path_(std::move(final_path)), dir_(folder_of(final_path_)), size_(size) {
  // The queue first: once the temporary exists, only the reservation below can fail.
  queue_ =
      std::make_unique<WriteQueue>(options.queue_depth, options.chunk_bytes, options.use_io_uring);
  ExclusiveTemporary t = create_exclusive_temporary(
      dir_, temporary_prefix(std::filesystem::path(final_path_).filename().string()));
  temporary_ = std::move(t.path);
  fd_ = t.fd;
  if (fd_ < 0) fail("create", t.error, 0);
  if (options.preallocate && size_ > 0) {
    int rc;
    do {
      rc = ::fallocate(fd_, 0, 0, off_t(size_));
    } while (rc != 0 && errno == EINTR);
    // A file system without fallocate still gets the file; the writes then find the space.
    if (rc != 0 && errno != EOPNOTSUPP && errno != ENOSYS) {
      const int error = errno;
      ::close(fd_);
      fd_ = -1;
      ::unlink(temporary_.c_str());
      fail("fallocate", error, 0);
    }
  }
}

AtomicFile::~AtomicFile() {
  queue_.reset();  // waits for the writes still reading the caller's buffers
  if (fd_ >= 0) ::close(fd_);
  // A temporary that cannot be removed here is removed by the next writer of the directory.
  if (!committed_) ::unlink(temporary_.c_str());
}

bool AtomicFile::uses_io_uring() const { return queue_->uses_io_uring(); }

void AtomicFile::fail(const char* call, int error, uint64_t offset) const {
  const std::string where = fmt::format("cannot write {} (through {}, {} at byte {}): {}",
                                        final_path_, temporary_, call, offset, errno_text(error));
  if (!is_space_error(error))
    throw Error(Errc::kCheckpoint, dir_,
                where + ". The files already in the directory are untouched.");
  struct statvfs fs {};
  const std::string free_text =
      ::statvfs(dir_.c_str(), &fs) == 0
          ? bytes_text(uint64_t(fs.f_bavail) * fs.f_frsize) + " are free there"
          : "the free space is unknown";
  throw Error(
      Errc::kCheckpoint, dir_,
      where + ". The file needs " + bytes_text(size_) + "; " + free_text +
          (error == EFBIG ? " (or a file size limit, ulimit -f, is below the file's size)" : "") +
          ". Free space there or choose another directory; the files already in the directory "
          "are untouched.");
}

void AtomicFile::write(const void* bytes, size_t size, uint64_t offset) {
  queue_->write(fd_, bytes, size, offset);
  if (const auto& f = queue_->failure()) fail(f->call, f->error, f->offset);
}

void AtomicFile::commit() {
  if (const auto f = queue_->sync(fd_)) fail(f->call, f->error, f->offset);
  // The data is durable; close can still report a deferred write error (NFS).
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close", errno, 0);
  if (::rename(temporary_.c_str(), final_path_.c_str()) != 0) fail("rename", errno, 0);
  committed_ = true;
  sync_directory(dir_);
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    throw sys_error(Errc::kCheckpoint, errno, dir, "cannot open the directory to sync it");
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (rc != 0) throw sys_error(Errc::kCheckpoint, error, dir, "cannot sync the directory");
}

}  // namespace hsring::checkpoint
