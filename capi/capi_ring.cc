// The C ABI's process-wide entry points: versions, status names, the ring's shape, stop.
#include <fcntl.h>

#include <cerrno>
#include <string>

#include "capi/capi_error.h"
#include "capi/shape_of.h"
#include "common/signals.h"
#include "common/syscheck.h"
#include "shm/ring.h"

namespace hsring::capi {

hs_ring_shape to_c_shape(const RingShape& s) {
  hs_ring_shape out{};
  out.slot_count = s.slot_count;
  out.max_tokens = s.max_tokens;
  out.hidden_size = s.hidden_size;
  out.num_layers = s.num_layers;
  out.dtype = uint32_t(s.dtype);
  out.dtype_size = dtype_size(s.dtype);
  out.split_layers = s.split_layers;
  out.num_targets = s.num_targets;
  out.num_drafters = s.num_drafters;
  out.hs_min_ready = s.hs_min_ready;
  out.content = uint32_t(s.content);
  out.vocab_size = s.vocab_size;
  for (uint32_t k = 0; k < kMaxCapturedLayers && k < HS_MAX_LAYERS; ++k)
    out.layer_ids[k] = s.layer_ids[k];
  out.batch_limit = s.batch_limit;
  return out;
}

void segment_of(const Ring& ring, const void** base, uint64_t* size, int* fd) {
  require_pointer(base, "base");
  require_pointer(size, "size");
  require_pointer(fd, "fd");
  // Not dup(): a duplicate shares the open file description, whose lock is the handle's
  // liveness (a mapping of it would keep a closed worker alive to the launcher).
  const std::string self = "/proc/self/fd/" + std::to_string(ring.fd());
  const int reopened = ::open(self.c_str(), O_RDONLY | O_CLOEXEC);
  if (reopened < 0)
    throw Error(Errc::kSystem, "ring '" + ring.name() + "': cannot reopen its segment through " +
                                   self + ": " + errno_text(errno) + " (is /proc mounted?)");
  *base = ring.base();
  *size = ring.size();
  *fd = reopened;
}

static_assert(HS_MAX_LAYERS == kMaxCapturedLayers, "hs_ring_shape.layer_ids mirrors the ring's");
static_assert(HS_DTYPE_BF16 == int(DType::kBF16) && HS_DTYPE_FP16 == int(DType::kFP16) &&
                  HS_DTYPE_FP32 == int(DType::kFP32),
              "the C dtypes are the ring's");

}  // namespace hsring::capi

using namespace hsring;

extern "C" {

HS_API const char* hs_status_name(hs_status status) {
  switch (status) {
    case HS_OK:
      return "HS_OK";
    case HS_STOPPED:
      return "HS_STOPPED";
    case HS_TIMEOUT:
      return "HS_TIMEOUT";
    case HS_ERR_INVALID_ARGUMENT:
      return "HS_ERR_INVALID_ARGUMENT";
    case HS_ERR_NOT_FOUND:
      return "HS_ERR_NOT_FOUND";
    case HS_ERR_RING:
      return "HS_ERR_RING";
    case HS_ERR_BUSY:
      return "HS_ERR_BUSY";
    case HS_ERR_STATE:
      return "HS_ERR_STATE";
    case HS_ERR_SHAPE:
      return "HS_ERR_SHAPE";
    case HS_ERR_LOST_SLOT:
      return "HS_ERR_LOST_SLOT";
    case HS_ERR_DATA:
      return "HS_ERR_DATA";
    case HS_ERR_CUDA:
      return "HS_ERR_CUDA";
    case HS_ERR_UNSUPPORTED:
      return "HS_ERR_UNSUPPORTED";
    case HS_ERR_INTERNAL:
      return "HS_ERR_INTERNAL";
  }
  return "HS_UNKNOWN";
}

HS_API int hs_api_version(void) { return HS_API_VERSION; }

HS_API int hs_has_cuda(void) {
#if HSRING_CAPI_CUDA
  return 1;
#else
  return 0;
#endif
}

// request_stop() is one relaxed atomic store: async-signal-safe.
HS_API void hs_request_stop(void) { request_stop(); }

HS_API hs_status hs_ring_shape_of(const char* ring, hs_ring_shape* out) {
  return capi::guarded([&] {
    capi::require_pointer(ring, "ring");
    capi::require_pointer(out, "out");
    auto attached = Ring::attach(ring, Ring::Access::kReadOnly);
    *out = capi::to_c_shape(attached->shape());
    return HS_OK;
  });
}

}  // extern "C"
