#include "common/exclusive_file.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>

namespace hsring {

namespace {

// 64 bits an attacker cannot guess, so no name can be planted in advance. getrandom only
// fails on a kernel without it or before the pool is ready at boot; the fallback is then
// unique within this host (pid, time, counter), which O_EXCL still makes safe.
uint64_t random_bits() {
  uint64_t bits = 0;
  if (::getrandom(&bits, sizeof bits, GRND_NONBLOCK) == ssize_t(sizeof bits)) return bits;
  static std::atomic<uint64_t> counter{0};
  const uint64_t now = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  return (uint64_t(::getpid()) << 40) ^ now ^ (counter.fetch_add(1) * 0x9e3779b97f4a7c15ull);
}

std::string random_suffix() {
  static constexpr char kDigits[] = "0123456789abcdefghijklmnopqrstuv";  // 32 symbols
  uint64_t bits = random_bits();
  std::string suffix;
  for (int i = 0; i < 13; ++i, bits >>= 5) suffix.push_back(kDigits[bits & 31]);
  return suffix;
}

}  // namespace

ExclusiveTemporary create_exclusive_temporary(const std::string& dir, const std::string& prefix,
                                              mode_t mode) {
  ExclusiveTemporary t;
  // A name that exists is someone else's (a writer's temporary, a planted name): try
  // another. 100 collisions of 64 random bits means the folder is being flooded.
  for (int attempt = 0; attempt < 100; ++attempt) {
    t.path = (dir.empty() ? std::string(".") : dir) + "/" + prefix + random_suffix();
    t.fd = ::open(t.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (t.fd >= 0) {
      t.error = 0;
      return t;
    }
    t.error = errno;
    if (t.error != EEXIST && t.error != EINTR) break;
  }
  return t;
}

ExclusiveFolder create_exclusive_folder(const std::string& parent, const std::string& prefix) {
  ExclusiveFolder f;
  for (int attempt = 0; attempt < 100; ++attempt) {
    f.path = (parent.empty() ? std::string(".") : parent) + "/" + prefix + random_suffix();
    if (::mkdir(f.path.c_str(), 0755) == 0) {
      f.error = 0;
      return f;
    }
    f.error = errno;
    if (f.error != EEXIST && f.error != EINTR) break;
  }
  return f;
}

std::string folder_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace hsring
