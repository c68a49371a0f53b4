#include "common/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "common/clock.h"

namespace hsring {

void notify_systemd(const std::string& message) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || path[0] == '\0') return;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const size_t length = std::strlen(path);
  if (length >= sizeof address.sun_path) return;
  std::memcpy(address.sun_path, path, length);
  if (path[0] == '@') address.sun_path[0] = '\0';  // abstract socket namespace
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  ::sendto(fd, message.data(), message.size(), MSG_NOSIGNAL,
           reinterpret_cast<const sockaddr*>(&address),
           socklen_t(offsetof(sockaddr_un, sun_path) + length));
  ::close(fd);
}

void notify_ready() { notify_systemd("READY=1"); }

void notify_watchdog() {
  static const uint64_t period_ns = [] {
    const char* usec = std::getenv("WATCHDOG_USEC");
    return usec ? uint64_t(std::strtoull(usec, nullptr, 10)) * 1000 : 0;
  }();
  if (period_ns == 0) return;
  // Relaxed: a stale read only sends one extra or one late ping within the period.
  static std::atomic<uint64_t> last_ns{0};
  const uint64_t now = monotonic_ns();
  if (now - last_ns.load(std::memory_order_relaxed) < period_ns / 2) return;
  last_ns.store(now, std::memory_order_relaxed);
  notify_systemd("WATCHDOG=1");
}

}  // namespace hsring
