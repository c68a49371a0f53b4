// How the C API turns C++ failures into an hs_status and a per-thread message: every
// exported function runs its body through guarded(), so no exception crosses the ABI.
#pragma once

#include <string>

#include "common/error.h"
#include "hsring/hsring.h"

namespace hsring::capi {

// Records `message` as this thread's last error and returns `status`.
hs_status fail(hs_status status, const std::string& message);

// Maps the exception in flight (an Error by its code: status_of; any other as
// HS_ERR_INTERNAL) to a status and records its message. REQUIRES: called inside a catch block.
hs_status status_of_current_exception();

// Runs `body` (which returns an hs_status); an exception becomes its status.
template <class Body>
hs_status guarded(Body&& body) noexcept {
  try {
    return body();
  } catch (...) {
    return status_of_current_exception();
  }
}

// The one map from an error code to the status the C API reports for it.
hs_status status_of(Errc code);

// Throws Error(kUsage), HS_ERR_INVALID_ARGUMENT, naming `what` when `pointer` is null.
inline void require_pointer(const void* pointer, const char* what) {
  if (pointer == nullptr) throw Error(Errc::kUsage, std::string(what) + " is NULL");
}

}  // namespace hsring::capi
