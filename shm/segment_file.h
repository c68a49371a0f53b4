// The one way hsring opens or creates a POSIX shared-memory segment (the ring and the
// `<ring>-grads` gradient exchange alike): the descriptor is close-on-exec and the file
// must belong to this user with mode 0600, or it is refused before anything maps it
// (docs/ring-protocol.md, "Untrusted memory"). It stands on Boost.Interprocess, the project's
// package for shared memory: SegmentFile holds a boost::interprocess::shared_memory_object,
// SegmentMapping a boost::interprocess::mapped_region, and Boost's errors become Error.
#pragma once

#include <sys/types.h>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cstddef>
#include <cstdint>
#include <string>

namespace hsring {

class SegmentFile {
 public:
  enum class Open {
    kCreate,        // a new segment; Error kExists when there is one
    kExisting,      // an existing one; Error kNotFound when there is none
    kCreateOrOpen,  // a new one, or the one already there
  };
  enum class Access { kReadWrite, kReadOnly };
  // Which file-mode rule the segment must meet. kOwnerOnly is for commands that judge a
  // file before deciding to remove it (`hsring ring remove`): never for mapping one.
  enum class Check { kOwnerAndMode, kOwnerOnly };

  // Opens /dev/shm/<name>; `what` names it in errors ("ring 'x'", "gradient exchange
  // 'x-grads'"). A created file gets mode 0600 exactly. Throws Error: kNotFound,
  // kExists, kPermission, kSystem, kForeignOwner (another uid owns it), kUnsafeMode (its
  // mode is not 0600: another user could write it). REQUIRES: `name` passed ring_name_problem (or
  // is a ring's name plus a suffix).
  static SegmentFile open(const std::string& name, const std::string& what, Open how, Access access,
                          Check check = Check::kOwnerAndMode);

  SegmentFile(SegmentFile&& other) noexcept;
  SegmentFile& operator=(SegmentFile&& other) noexcept;
  SegmentFile(const SegmentFile&) = delete;
  SegmentFile& operator=(const SegmentFile&) = delete;
  ~SegmentFile();

  // The shared_memory_object's descriptor, for fcntl, fstat, posix_fallocate and the
  // liveness locks; -1 once moved from.
  int fd() const { return shm_.get_mapping_handle().handle; }
  bool created() const { return created_; }
  // The size at open (a created file: 0).
  uint64_t size_at_open() const { return size_; }

 private:
  SegmentFile(boost::interprocess::shared_memory_object shm, bool created, uint64_t size);
  boost::interprocess::shared_memory_object shm_;
  bool created_ = false;
  uint64_t size_ = 0;
};

// A shared mapping of a segment's first `size` bytes, unmapped on destruction. Throws
// Error (kSystem) naming `what` when mmap fails.
class SegmentMapping {
 public:
  SegmentMapping() = default;
  SegmentMapping(int fd, size_t size, bool writable, const std::string& what);
  SegmentMapping(SegmentMapping&& other) noexcept;
  SegmentMapping& operator=(SegmentMapping&& other) noexcept;
  SegmentMapping(const SegmentMapping&) = delete;
  SegmentMapping& operator=(const SegmentMapping&) = delete;
  ~SegmentMapping();

  std::byte* base() const { return static_cast<std::byte*>(region_.get_address()); }
  size_t size() const { return region_.get_size(); }

 private:
  boost::interprocess::mapped_region region_;
};

}  // namespace hsring
