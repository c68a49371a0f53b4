// How the C API turns C++ failures into an hs_status and a per-thread message: every
// exported function runs its body through guarded(), so no exception crosses the ABI.
#pragma once

#include <stdexcept>
#include <string>

#include "hsring/hsring.h"

namespace hsring::capi {

// A failure the API reports as `status` with `message` (hs_last_error()).
class ApiError : public std::runtime_error {
 public:
  ApiError(hs_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  hs_status status() const { return status_; }

 private:
  hs_status status_;
};

// Records `message` as this thread's last error and returns `status`.
hs_status fail(hs_status status, const std::string& message);

// Maps the exception in flight (RingError, DataError, ApiError, CudaError...) to a status
// and records its message. REQUIRES: called inside a catch block.
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

// Throws ApiError(HS_ERR_INVALID_ARGUMENT) naming `what` when `pointer` is null.
inline void require_pointer(const void* pointer, const char* what) {
  if (pointer == nullptr) throw ApiError(HS_ERR_INVALID_ARGUMENT, std::string(what) + " is NULL");
}

}  // namespace hsring::capi
