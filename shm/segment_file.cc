#include "shm/segment_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "shm/ring_error.h"

namespace hsring {

namespace {

std::string path_of(const std::string& name) { return "/dev/shm/" + name; }

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", unsigned(mode & 07777));
  return text;
}

[[noreturn]] void throw_errno(int err, const std::string& what, const std::string& name,
                              const char* action) {
  if (err == ENOENT)
    throw RingError(RingErrc::kNotFound, what + " does not exist (no " + path_of(name) + ")");
  if (err == EEXIST)
    throw RingError(RingErrc::kExists, what + " already exists (" + path_of(name) + ")");
  if (err == EACCES || err == EPERM)
    throw RingError(RingErrc::kPermission, std::string("cannot ") + action + " " + what +
                                               ": permission denied; " + path_of(name) +
                                               " may belong to another user");
  throw RingError(RingErrc::kSystem,
                  std::string("cannot ") + action + " " + what + ": " + std::strerror(err));
}

// Closes `fd` when a check fails, so a refused segment leaves no descriptor behind.
struct CloseOnThrow {
  int fd;
  bool armed = true;
  ~CloseOnThrow() {
    if (armed) ::close(fd);
  }
};

}  // namespace

SegmentFile SegmentFile::open(const std::string& name, const std::string& what, Open how,
                              Access access, Check check) {
  const std::string shm_name = "/" + name;
  const int rw = access == Access::kReadWrite ? O_RDWR : O_RDONLY;
  int fd = -1;
  bool created = false;
  if (how != Open::kExisting) {
    fd = ::shm_open(shm_name.c_str(), rw | O_CREAT | O_EXCL, 0600);
    if (fd >= 0)
      created = true;
    else if (errno != EEXIST || how == Open::kCreate)
      throw_errno(errno, what, name, "create");
  }
  if (fd < 0) {
    fd = ::shm_open(shm_name.c_str(), rw, 0);
    if (fd < 0) throw_errno(errno, what, name, "open");
  }
  CloseOnThrow guard{fd};
  // Children exec'd by the launcher must not share this open file description: they would
  // hold its liveness locks alive after we die, and could write a segment they never opened.
  const int flags = ::fcntl(fd, F_GETFD);
  if (flags < 0 || ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC) < 0)
    throw RingError(RingErrc::kSystem,
                    "fcntl(FD_CLOEXEC) on " + what + ": " + std::strerror(errno));
  // The umask can only narrow the mode of a new file; make it exact.
  if (created && ::fchmod(fd, 0600) != 0) {
    const int err = errno;
    ::shm_unlink(shm_name.c_str());
    throw RingError(RingErrc::kSystem, "fchmod of " + what + ": " + std::strerror(err));
  }
  struct stat st{};
  if (::fstat(fd, &st) != 0)
    throw RingError(RingErrc::kSystem, "fstat of " + what + ": " + std::strerror(errno));
  // A file of another user, or one that others may write, could be rewritten under us at
  // any time: refuse it before it is mapped, whatever it holds.
  if (st.st_uid != ::geteuid()) {
    throw RingError(RingErrc::kForeignOwner,
                    what + " belongs to uid " + std::to_string(st.st_uid) + ", not to you (uid " +
                        std::to_string(::geteuid()) +
                        "); hsring never opens another user's "
                        "segment: pick another --ring, or have its owner (or root) remove " +
                        path_of(name));
  }
  if (check == Check::kOwnerAndMode && (st.st_mode & 07777) != 0600) {
    throw RingError(RingErrc::kUnsafeMode,
                    what + " has mode " + octal_mode(st.st_mode) +
                        ", not 0600: other users may be able to write it, so hsring will not "
                        "map it; if nobody else should have made it, remove " +
                        path_of(name) + " (`hsring ring remove --force`) and find out who did");
  }
  guard.armed = false;
  return SegmentFile(fd, created, uint64_t(st.st_size));
}

SegmentFile::SegmentFile(SegmentFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), created_(other.created_), size_(other.size_) {}

SegmentFile& SegmentFile::operator=(SegmentFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    created_ = other.created_;
    size_ = other.size_;
  }
  return *this;
}

SegmentFile::~SegmentFile() {
  if (fd_ >= 0) ::close(fd_);
}

SegmentMapping::SegmentMapping(int fd, size_t size, bool writable, const std::string& what) {
  void* base =
      ::mmap(nullptr, size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED)
    throw RingError(RingErrc::kSystem, "cannot map " + std::to_string(size) + " bytes of " + what +
                                           ": " + std::strerror(errno));
  base_ = static_cast<std::byte*>(base);
  size_ = size;
}

SegmentMapping::SegmentMapping(SegmentMapping&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), size_(std::exchange(other.size_, 0)) {}

SegmentMapping& SegmentMapping::operator=(SegmentMapping&& other) noexcept {
  if (this != &other) {
    if (base_) ::munmap(base_, size_);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

SegmentMapping::~SegmentMapping() {
  if (base_) ::munmap(base_, size_);
}

}  // namespace hsring
