// The one exception type of ring setup (create, attach, remove): a code to branch on and a
// message that names the problem and what to do about it.
#pragma once

#include <stdexcept>
#include <string>

namespace hsring {

enum class RingErrc {
  kNotFound,      // no segment of that name
  kExists,        // create: a segment of that name is already there
  kForeignOwner,  // the segment belongs to another user
  kPermission,    // the OS refused access
  kBadMagic,      // not an hsring segment
  kBadVersion,    // an hsring segment of another protocol version
  kBadLayout,     // header fields inconsistent with each other
  kTruncated,     // the segment is smaller than its header says
  kBadShape,      // create: an impossible ring shape
  kNoSpace,       // /dev/shm cannot hold the segment
  kProcessBusy,   // the process index is held by a live process
  kSystem,        // another system call failed
  kBadName,       // a name that cannot be a segment's (ring_name_problem)
  kUnsafeMode,    // the segment's file mode is not 0600: others may write it
};
const char* to_string(RingErrc code);

class RingError : public std::runtime_error {
 public:
  RingError(RingErrc code, const std::string& message) : std::runtime_error(message), code_(code) {}
  RingErrc code() const { return code_; }

 private:
  RingErrc code_;
};

}  // namespace hsring
