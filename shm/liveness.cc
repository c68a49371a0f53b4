#include "shm/liveness.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cinttypes>
#include <cstdio>
#include <fstream>

#include <cerrno>
#include <string>

#include "common/syscheck.h"

namespace hsring {

namespace {

struct flock lock_request(short type, uint32_t index) {
  struct flock request {};
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
  throw sys_error(Errc::kRing, errno, "liveness lock: fcntl(F_OFD_SETLK)");
}

void release_liveness_lock(int fd, uint32_t index) {
  struct flock request = lock_request(F_UNLCK, index);
  ::fcntl(fd, F_OFD_SETLK, &request);
}

bool liveness_lock_held_elsewhere(int fd, uint32_t index) {
  // Probe with a read lock: it conflicts with the holder's write lock only.
  struct flock request = lock_request(F_RDLCK, index);
  syscheck(::fcntl(fd, F_OFD_GETLK, &request), Errc::kRing, "liveness lock: fcntl(F_OFD_GETLK)");
  return request.l_type != F_UNLCK;
}

int liveness_lock_holder(int fd, uint32_t index) {
  struct flock request = lock_request(F_RDLCK, index);
  if (::fcntl(fd, F_OFD_GETLK, &request) != 0 || request.l_type == F_UNLCK) return 0;
  return request.l_pid;
}

bool any_liveness_lock_held_elsewhere(int fd) {
  // One probe over every index up to and including the launcher's: F_OFD_GETLK reports
  // the first conflicting lock in the range.
  struct flock request = lock_request(F_RDLCK, 0);
  request.l_len = off_t(kLauncherLockIndex) + 1;
  syscheck(::fcntl(fd, F_OFD_GETLK, &request), Errc::kRing, "liveness lock: fcntl(F_OFD_GETLK)");
  return request.l_type != F_UNLCK;
}

namespace {

// Whether one "lock:" line of an fdinfo file is an OFD write lock on file (dev, ino)
// covering byte `at`. The line reads (fs/locks.c, lock_get_status):
//   lock:\t1: OFDLCK ADVISORY  WRITE -1 00:1b:544 1099511693312 1099511693312
// (the end is "EOF" for a lock to the end of the file).
bool line_holds(const std::string& line, dev_t dev, ino_t ino, uint64_t at) {
  if (line.find(" OFDLCK ") == std::string::npos || line.find(" WRITE ") == std::string::npos)
    return false;
  unsigned major_no = 0, minor_no = 0;
  unsigned long long inode = 0, start = 0;
  char end_text[32] = {};
  const size_t write_at = line.find(" WRITE ");
  if (std::sscanf(line.c_str() + write_at, " WRITE %*d %x:%x:%llu %llu %31s", &major_no, &minor_no,
                  &inode, &start, end_text) != 5)
    return false;
  if (major_no != major(dev) || minor_no != minor(dev) || inode != uint64_t(ino)) return false;
  if (start > at) return false;
  if (std::string(end_text) == "EOF") return true;
  return std::strtoull(end_text, nullptr, 10) >= at;
}

}  // namespace

bool process_holds_liveness_lock(int pid, int fd, uint32_t index) {
  if (pid <= 0) return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return false;
  const uint64_t at = kLivenessLockBase + index;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fdinfo";
  DIR* entries = ::opendir(dir.c_str());
  if (!entries) return false;
  bool held = false;
  while (!held) {
    const dirent* entry = ::readdir(entries);
    if (!entry) break;
    if (entry->d_name[0] == '.') continue;
    std::ifstream info(dir + "/" + entry->d_name);
    for (std::string line; !held && std::getline(info, line);)
      held = line.rfind("lock:", 0) == 0 && line_holds(line, st.st_dev, st.st_ino, at);
  }
  ::closedir(entries);
  return held;
}

}  // namespace hsring
