#include "common/log.h"

#include <unistd.h>

namespace hsring {

namespace {
std::string g_prefix = "hsring";
}

void set_log_prefix(const std::string& prefix) { g_prefix = prefix; }

void log_line(const std::string& message) {
  // One write per line, so lines of processes sharing a terminal never interleave.
  const std::string line = "[" + g_prefix + "] " + message + "\n";
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace hsring
