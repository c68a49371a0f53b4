#include "capi/capi_error.h"

#include <new>

#include "data/data_error.h"
#include "model/model_error.h"
#include "shm/ring_error.h"

namespace hsring::capi {

namespace {

// Per thread: a caller reads the message of its own last failing call.
thread_local std::string t_last_error;

hs_status status_of(RingErrc code) {
  switch (code) {
    case RingErrc::kNotFound:
      return HS_ERR_NOT_FOUND;
    case RingErrc::kProcessBusy:
      return HS_ERR_BUSY;
    case RingErrc::kBadShape:
    case RingErrc::kBadName:
      return HS_ERR_INVALID_ARGUMENT;
    default:
      return HS_ERR_RING;
  }
}

}  // namespace

hs_status fail(hs_status status, const std::string& message) {
  try {
    t_last_error = message;
  } catch (...) {
    // Out of memory for the message: the status still says what kind of failure it was.
  }
  return status;
}

hs_status status_of_current_exception() {
  try {
    throw;
  } catch (const ApiError& e) {
    return fail(e.status(), e.what());
  } catch (const RingError& e) {
    return fail(status_of(e.code()), e.what());
  } catch (const data::DataError& e) {
    return fail(HS_ERR_DATA, e.what());
  } catch (const ModelError& e) {
    return fail(HS_ERR_DATA, e.what());
  } catch (const std::invalid_argument& e) {
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
