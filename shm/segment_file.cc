#include "shm/segment_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <boost/interprocess/exceptions.hpp>
#include <cerrno>
#include <cstdio>
#include <utility>

#include "common/error.h"
#include "common/syscheck.h"

namespace hsring {

namespace bip = boost::interprocess;

namespace {

std::string path_of(const std::string& name) { return "/dev/shm/" + name; }

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", unsigned(mode & 07777));
  return text;
}

// The system's words for a Boost error: those of the errno Boost caught, or Boost's own
// text for an error of its own making (no errno).
std::string reason_of(const bip::interprocess_exception& e) {
  return e.get_native_error() != 0 ? errno_text(e.get_native_error()) : e.what();
}

// Boost reports errors as interprocess_exception; turn them into Error.
[[noreturn]] void rethrow_boost(const bip::interprocess_exception& e, const std::string& what,
                                const std::string& name, const char* action) {
  switch (e.get_error_code()) {
    case bip::not_found_error:
      throw Error(Errc::kRingNotFound, what + " does not exist (no " + path_of(name) + ")");
    case bip::already_exists_error:
      throw Error(Errc::kRingExists, what + " already exists (" + path_of(name) + ")");
    default:
      // Boost files EACCES under security_error and EPERM under other_error: both are a
      // permission refusal.
      if (e.get_error_code() == bip::security_error || e.get_native_error() == EPERM)
        throw Error(Errc::kRing, std::string("cannot ") + action + " " + what +
                                     ": permission denied; " + path_of(name) +
                                     " may belong to another user");
      throw Error(Errc::kRing, std::string("cannot ") + action + " " + what + ": " + reason_of(e));
  }
}

// The object itself carries the file's mode and owner, not the mode asked for: `permissions`
// only applies to a file this call creates.
bip::shared_memory_object open_object(const std::string& name, const std::string& what,
                                      SegmentFile::Open how, bip::mode_t mode, bool* created) {
  *created = false;
  if (how != SegmentFile::Open::kExisting) {
    // Not open_or_create: it cannot say whether it made the file, and a creator must
    // reserve and initialise what it made.
    try {
      bip::shared_memory_object shm(bip::create_only, name.c_str(), mode, bip::permissions(0600));
      *created = true;
      return shm;
    } catch (const bip::interprocess_exception& e) {
      if (e.get_error_code() != bip::already_exists_error || how == SegmentFile::Open::kCreate)
        rethrow_boost(e, what, name, "create");
    }
  }
  try {
    return bip::shared_memory_object(bip::open_only, name.c_str(), mode);
  } catch (const bip::interprocess_exception& e) {
    rethrow_boost(e, what, name, "open");
  }
}

}  // namespace

SegmentFile::SegmentFile(bip::shared_memory_object shm, bool created, uint64_t size)
    : shm_(std::move(shm)), created_(created), size_(size) {}

SegmentFile SegmentFile::open(const std::string& name, const std::string& what, Open how,
                              Access access, Check check) {
  bool created = false;
  // A refused segment leaves no descriptor behind: `shm` closes it on every throw below.
  bip::shared_memory_object shm = open_object(
      name, what, how, access == Access::kReadWrite ? bip::read_write : bip::read_only, &created);
  const int fd = shm.get_mapping_handle().handle;
  // Children exec'd by the launcher must not share this open file description: they would
  // hold its liveness locks alive after we die, and could write a segment they never opened.
  const int flags = ::fcntl(fd, F_GETFD);
  if (flags < 0 || ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC) < 0)
    throw sys_error(Errc::kRing, errno, fmt::format("fcntl(FD_CLOEXEC) on {}", what));
  // The umask can only narrow the mode of a new file, and Boost does not check its own
  // fchmod; make it exact.
  if (created && ::fchmod(fd, 0600) != 0) {
    const int err = errno;
    bip::shared_memory_object::remove(name.c_str());
    throw sys_error(Errc::kRing, err, fmt::format("fchmod of {}", what));
  }
  struct stat st {};
  syscheck(::fstat(fd, &st), Errc::kRing, fmt::format("fstat of {}", what));
  // A file of another user, or one that others may write, could be rewritten under us at
  // any time: refuse it before it is mapped, whatever it holds.
  if (st.st_uid != ::geteuid()) {
    throw Error(Errc::kRing,
                fmt::format("{} belongs to uid {}, not to you (uid {}); hsring never opens "
                            "another user's segment: pick another --ring, or have its owner (or "
                            "root) remove {}",
                            what, st.st_uid, ::geteuid(), path_of(name)));
  }
  if (check == Check::kOwnerAndMode && (st.st_mode & 07777) != 0600) {
    throw Error(Errc::kRing,
                what + " has mode " + octal_mode(st.st_mode) +
                    ", not 0600: other users may be able to write it, so hsring will not "
                    "map it; if nobody else should have made it, remove " +
                    path_of(name) + " (`hsring ring remove --force`) and find out who did");
  }
  return SegmentFile(std::move(shm), created, uint64_t(st.st_size));
}

SegmentFile::SegmentFile(SegmentFile&& other) noexcept = default;
SegmentFile& SegmentFile::operator=(SegmentFile&& other) noexcept = default;
SegmentFile::~SegmentFile() = default;

namespace {

// What mapped_region needs of a mappable object, for a descriptor SegmentFile opened.
struct MappableFd {
  int fd;
  bip::mapping_handle_t get_mapping_handle() const {
    return bip::ipcdetail::mapping_handle_from_file_handle(fd);
  }
};

}  // namespace

SegmentMapping::SegmentMapping(int fd, size_t size, bool writable, const std::string& what) {
  auto failed = [&](const std::string& reason) {
    return Error(Errc::kRing, fmt::format("cannot map {} bytes of {}: {}", size, what, reason));
  };
  // mapped_region reads a size of 0 as "the whole file"; mmap refuses it, and so do we.
  if (size == 0) throw failed(errno_text(EINVAL));
  try {
    region_ =
        bip::mapped_region(MappableFd{fd}, writable ? bip::read_write : bip::read_only, 0, size);
  } catch (const bip::interprocess_exception& e) {
    throw failed(reason_of(e));
  }
}

SegmentMapping::SegmentMapping(SegmentMapping&& other) noexcept = default;
SegmentMapping& SegmentMapping::operator=(SegmentMapping&& other) noexcept = default;
SegmentMapping::~SegmentMapping() = default;

}  // namespace hsring
