// One-line logs on stderr, each with the process's prefix (role, index, GPU, epoch), so
// interleaved worker output stays attributable.
#pragma once

#include <string>

namespace hsring {

void set_log_prefix(const std::string& prefix);
void log_line(const std::string& message);  // "[prefix] message\n", one write() call

}  // namespace hsring
