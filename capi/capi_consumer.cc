// The C ABI of consumers: thin wrappers over capi::Consumer, each guarded.
#include "capi/capi_error.h"
#include "capi/consumer.h"
#include "capi/shape_of.h"

using hsring::capi::Consumer;
using hsring::capi::guarded;
using hsring::capi::require_pointer;

struct hs_consumer {
  std::unique_ptr<Consumer> impl;
};

namespace {

Consumer& consumer_of(hs_consumer* c) {
  require_pointer(c, "consumer");
  return *c->impl;
}

}  // namespace

extern "C" {

HS_API hs_status hs_consumer_open(const char* ring, uint32_t index,
                                  const hs_consumer_options* options, hs_consumer** out) {
  return guarded([&] {
    require_pointer(ring, "ring");
    require_pointer(out, "out");
    *out = nullptr;
    const hs_consumer_options defaults{};
    auto impl = Consumer::open(ring, index, options ? *options : defaults);
    *out = new hs_consumer{std::move(impl)};
    return HS_OK;
  });
}

HS_API hs_status hs_consumer_close(hs_consumer* consumer) {
  return guarded([&] {
    delete consumer;
    return HS_OK;
  });
}

HS_API hs_status hs_consumer_shape(const hs_consumer* consumer, hs_ring_shape* out) {
  return guarded([&] {
    require_pointer(consumer, "consumer");
    require_pointer(out, "out");
    *out = hsring::capi::to_c_shape(consumer->impl->ring().shape());
    return HS_OK;
  });
}

HS_API uint32_t hs_consumer_epoch(const hs_consumer* consumer) {
  return consumer ? consumer->impl->epoch() : 0;
}

HS_API hs_status hs_consumer_segment(const hs_consumer* consumer, const void** base, uint64_t* size,
                                     int* fd) {
  return guarded([&] {
    require_pointer(consumer, "consumer");
    hsring::capi::segment_of(consumer->impl->ring(), base, size, fd);
    return HS_OK;
  });
}

HS_API hs_status hs_consumer_next(hs_consumer* consumer, uint32_t timeout_ms, hs_batch* out) {
  return guarded([&] {
    require_pointer(out, "out");
    return consumer_of(consumer).next(timeout_ms, *out);
  });
}

HS_API hs_status hs_consumer_release(hs_consumer* consumer, uint64_t ticket) {
  return guarded([&] { return consumer_of(consumer).release(ticket); });
}

HS_API hs_status hs_consumer_copy_to_device(hs_consumer* consumer, uint64_t ticket, void* device,
                                            uint64_t device_bytes, void* stream, float noise_std,
                                            uint64_t seed, uint64_t step) {
  return guarded([&] {
    require_pointer(device, "device");
    consumer_of(consumer).copy_to_device(ticket, device, device_bytes, stream, noise_std, seed,
                                         step);
    return HS_OK;
  });
}

}  // extern "C"
