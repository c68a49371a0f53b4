// System calls checked in one way, as NCCL's SYSCHECK checks them: a failed call becomes an
// hsring::Error of the caller's code whose message ends with the system's words for errno,
// never a strerror() spelled out at each site.
#pragma once

#include <cerrno>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"

namespace hsring {

// The system's words for errno value `err` ("No space left on device"); safe from any thread,
// unlike strerror.
std::string errno_text(int err);

// An Error whose message is "<what>: <errno_text(err)>", "<path>: <what>: ..." or
// "<path>: byte <offset>: <what>: ...". Thrown by the caller (`throw sys_error(...)`), so the
// control flow stays visible where the call fails.
Error sys_error(Errc code, int err, std::string_view what);
Error sys_error(Errc code, int err, std::string path, std::string_view what);
Error sys_error(Errc code, int err, std::string path, uint64_t offset, std::string_view what);

// The result of a call that fails with -1 and errno (open, fcntl, fstat, pipe2, signalfd,
// ...), or throws sys_error(code, errno, what):
//   const int fd = syscheck(::open(path, O_RDONLY), Errc::kSystem, "open " + path);
// A call interrupted by a signal is the caller's to retry (as read loops do), not this
// helper's.
template <class Result>
Result syscheck(Result result, Errc code, std::string_view what) {
  if (result == Result(-1)) throw sys_error(code, errno, what);
  return result;
}

}  // namespace hsring
