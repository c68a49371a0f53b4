#include "capi/capi_error.h"

#include <new>
#include <stdexcept>

#include "common/error.h"

namespace hsring::capi {

namespace {

// Per thread: a caller reads the message of its own last failing call.
thread_local std::string t_last_error;

}  // namespace

hs_status fail(hs_status status, const std::string& message) {
  try {
    t_last_error = message;
  } catch (...) {
    // Out of memory for the message: the status still says what kind of failure it was.
  }
  return status;
}

hs_status status_of(Errc code) {
  switch (code) {
    case Errc::kRingNotFound:
      return HS_ERR_NOT_FOUND;
    case Errc::kRingProcessBusy:
      return HS_ERR_BUSY;
    case Errc::kRingBadShape:
    case Errc::kRingBadName:
      return HS_ERR_INVALID_ARGUMENT;
    case Errc::kApiState:
      return HS_ERR_STATE;
    case Errc::kApiShape:
      return HS_ERR_SHAPE;
    case Errc::kApiUnsupported:
      return HS_ERR_UNSUPPORTED;
    default:
      break;
  }
  switch (layer_of(code)) {
    case ErrorClass::kUsage:
      return HS_ERR_INVALID_ARGUMENT;
    case ErrorClass::kRing:
      return HS_ERR_RING;
    case ErrorClass::kData:
    case ErrorClass::kModel:  // the shards' tokens do not fit the model, or its files
      return HS_ERR_DATA;
    case ErrorClass::kCuda:
      return HS_ERR_CUDA;
    case ErrorClass::kCheckpoint:
    case ErrorClass::kGroup:
    case ErrorClass::kApi:
    case ErrorClass::kSystem:
      break;
  }
  return HS_ERR_INTERNAL;
}

hs_status status_of_current_exception() {
  try {
    throw;
  } catch (const Error& e) {
    return fail(status_of(e.code()), e.what());
  } catch (const std::invalid_argument& e) {  // a library's (std::stoul...)
    return fail(HS_ERR_INVALID_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return fail(HS_ERR_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    return fail(HS_ERR_INTERNAL, e.what());
  } catch (...) {
    return fail(HS_ERR_INTERNAL, "unknown exception");
  }
}

}  // namespace hsring::capi

extern "C" {

HS_API const char* hs_last_error(void) { return hsring::capi::t_last_error.c_str(); }

}  // extern "C"
