#include "shm/liveness.h"

#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace hsring {

namespace {

struct flock lock_request(short type, uint32_t index) {
  struct flock request{};
  request.l_type = type;
  request.l_whence = SEEK_SET;
  request.l_start = off_t(kLivenessLockBase + index);
  request.l_len = 1;
  request.l_pid = 0;  // required by OFD locks
  return request;
}

}  // namespace

bool try_hold_liveness_lock(int fd, uint32_t index) {
  struct flock request = lock_request(F_WRLCK, index);
  if (::fcntl(fd, F_OFD_SETLK, &request) == 0) return true;
  if (errno == EAGAIN || errno == EACCES) return false;
  throw std::runtime_error(std::string("liveness lock: fcntl(F_OFD_SETLK): ") +
                           std::strerror(errno));
}

void release_liveness_lock(int fd, uint32_t index) {
  struct flock request = lock_request(F_UNLCK, index);
  ::fcntl(fd, F_OFD_SETLK, &request);
}

bool liveness_lock_held_elsewhere(int fd, uint32_t index) {
  // Probe with a read lock: it conflicts with the holder's write lock only.
  struct flock request = lock_request(F_RDLCK, index);
  if (::fcntl(fd, F_OFD_GETLK, &request) != 0) {
    throw std::runtime_error(std::string("liveness lock: fcntl(F_OFD_GETLK): ") +
                             std::strerror(errno));
  }
  return request.l_type != F_UNLCK;
}

int liveness_lock_holder(int fd, uint32_t index) {
  struct flock request = lock_request(F_RDLCK, index);
  if (::fcntl(fd, F_OFD_GETLK, &request) != 0 || request.l_type == F_UNLCK) return 0;
  return request.l_pid;
}

}  // namespace hsring
