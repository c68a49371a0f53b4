#include "common/contract.h"

#include <cstdio>
#include <cstdlib>

namespace hsring {

void contract_violated(const char* condition, const char* file, int line) noexcept {
  // fprintf, not log_line: no allocation on the way to abort().
  std::fprintf(stderr, "contract violated: %s (%s:%d)\n", condition, file, line);
  std::fflush(stderr);
  std::abort();
}

}  // namespace hsring
