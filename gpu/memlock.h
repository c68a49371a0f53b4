// Whether this process may pin host memory for DMA. Every GPU worker pins the ring's
// payload with cudaHostRegister; the launcher checks the same limit before it starts any
// worker, so a too-low `ulimit -l` is one clear error instead of a crash loop.
#pragma once

#include <cstdint>
#include <string>

namespace hsring::gpu {

// The RLIMIT_MEMLOCK soft limit in bytes; UINT64_MAX when unlimited.
uint64_t memlock_limit_bytes();

// "" when RLIMIT_MEMLOCK lets this process pin `bytes` for `what`, else a message naming
// the limit, what needs it, and how to raise it (`ulimit -l`, systemd's LimitMEMLOCK=).
// The check is on the limit alone, not on CAP_IPC_LOCK: the limit is how an operator
// says how much memory a service may pin, and we honour it as root too.
std::string memlock_problem(uint64_t bytes, const std::string& what);
// The same against a given limit (bytes; UINT64_MAX: unlimited).
std::string memlock_problem(uint64_t bytes, const std::string& what, uint64_t limit);

// "1.5 GiB", "640 MiB", "64 KiB": sizes as a person reads them.
std::string human_bytes(uint64_t bytes);

}  // namespace hsring::gpu
