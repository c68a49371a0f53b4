#include "gpu/memlock.h"

#include <sys/resource.h>

#include <cstdio>

namespace hsring::gpu {

uint64_t memlock_limit_bytes() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return 0;
  return limit.rlim_cur == RLIM_INFINITY ? UINT64_MAX : uint64_t(limit.rlim_cur);
}

std::string human_bytes(uint64_t bytes) {
  char text[64];
  if (bytes >= (1ull << 30))
    std::snprintf(text, sizeof text, "%.1f GiB", double(bytes) / double(1ull << 30));
  else if (bytes >= (1ull << 20))
    std::snprintf(text, sizeof text, "%.0f MiB", double(bytes) / double(1ull << 20));
  else
    std::snprintf(text, sizeof text, "%.0f KiB", double(bytes) / 1024.0);
  return text;
}

std::string memlock_problem(uint64_t bytes, const std::string& what) {
  return memlock_problem(bytes, what, memlock_limit_bytes());
}

std::string memlock_problem(uint64_t bytes, const std::string& what, uint64_t limit) {
  if (limit >= bytes) return "";
  return "pinning " + what + " for GPU DMA needs " + human_bytes(bytes) +
         " of locked memory, but this process may lock only " + human_bytes(limit) +
         " (RLIMIT_MEMLOCK): raise it with `ulimit -l unlimited` in the shell that starts "
         "hsring, `LimitMEMLOCK=infinity` in its systemd unit, or a memlock line in "
         "/etc/security/limits.conf; or make the ring smaller (--slots, --max-tokens)";
}

}  // namespace hsring::gpu
