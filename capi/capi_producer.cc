// The C ABI of producers: thin wrappers over capi::Producer, each guarded.
#include "capi/capi_error.h"
#include "capi/producer.h"
#include "capi/shape_of.h"

using hsring::capi::guarded;
using hsring::capi::Producer;
using hsring::capi::require_pointer;

struct hs_producer {
  std::unique_ptr<Producer> impl;
};

namespace {

Producer& producer_of(hs_producer* p) {
  require_pointer(p, "producer");
  return *p->impl;
}

}  // namespace

extern "C" {

HS_API hs_status hs_producer_open(const char* ring, uint32_t index,
                                  const hs_producer_options* options, hs_producer** out) {
  return guarded([&] {
    require_pointer(ring, "ring");
    require_pointer(out, "out");
    *out = nullptr;
    const hs_producer_options defaults{};
    auto impl = Producer::open(ring, index, options ? *options : defaults);
    *out = new hs_producer{std::move(impl)};
    return HS_OK;
  });
}

HS_API hs_status hs_producer_close(hs_producer* producer) {
  return guarded([&] {
    if (producer == nullptr) return HS_OK;
    const hs_status flushed = producer->impl->flush();
    delete producer;
    return flushed;
  });
}

HS_API hs_status hs_producer_shape(const hs_producer* producer, hs_ring_shape* out) {
  return guarded([&] {
    require_pointer(producer, "producer");
    require_pointer(out, "out");
    *out = hsring::capi::to_c_shape(producer->impl->ring().shape());
    return HS_OK;
  });
}

HS_API uint32_t hs_producer_epoch(const hs_producer* producer) {
  return producer ? producer->impl->epoch() : 0;
}

HS_API hs_status hs_producer_segment(const hs_producer* producer, const void** base, uint64_t* size,
                                     int* fd) {
  return guarded([&] {
    require_pointer(producer, "producer");
    hsring::capi::segment_of(producer->impl->ring(), base, size, fd);
    return HS_OK;
  });
}

HS_API hs_status hs_producer_next_job(hs_producer* producer, uint32_t timeout_ms, hs_job* out) {
  return guarded([&] {
    require_pointer(out, "out");
    return producer_of(producer).next_job(timeout_ms, *out);
  });
}

HS_API hs_status hs_job_set_tokens(hs_producer* producer, uint64_t ticket, const int32_t* tokens,
                                   const int32_t* positions, uint32_t count,
                                   const int32_t* doc_offsets, uint32_t num_docs) {
  return guarded([&] {
    require_pointer(tokens, "tokens");
    require_pointer(positions, "positions");
    require_pointer(doc_offsets, "doc_offsets");
    producer_of(producer).set_tokens(ticket, tokens, positions, count, doc_offsets, num_docs);
    return HS_OK;
  });
}

HS_API hs_status hs_job_write_layer(hs_producer* producer, uint64_t ticket, uint32_t layer,
                                    const void* host, uint64_t row_pitch) {
  return guarded([&] {
    require_pointer(host, "host");
    producer_of(producer).write_layers(ticket, layer, 1, &host, &row_pitch);
    return HS_OK;
  });
}

HS_API hs_status hs_job_write_layers(hs_producer* producer, uint64_t ticket, uint32_t first_layer,
                                     uint32_t count, const void* const* hosts,
                                     const uint64_t* row_pitches) {
  return guarded([&] {
    require_pointer(hosts, "hosts");
    producer_of(producer).write_layers(ticket, first_layer, count, hosts, row_pitches);
    return HS_OK;
  });
}

HS_API hs_status hs_job_write_labels(hs_producer* producer, uint64_t ticket, const int32_t* labels,
                                     uint32_t count) {
  return guarded([&] {
    require_pointer(labels, "labels");
    producer_of(producer).write_labels(ticket, labels, count);
    return HS_OK;
  });
}

HS_API hs_status hs_job_publish(hs_producer* producer, uint64_t ticket) {
  return guarded([&] { return producer_of(producer).publish(ticket); });
}

HS_API hs_status hs_job_copy_layer_device(hs_producer* producer, uint64_t ticket, uint32_t layer,
                                          const void* device, uint64_t row_pitch, void* stream) {
  return guarded([&] {
    require_pointer(device, "device");
    producer_of(producer).copy_layers_device(ticket, layer, 1, &device, &row_pitch, stream);
    return HS_OK;
  });
}

HS_API hs_status hs_job_copy_layers_device(hs_producer* producer, uint64_t ticket,
                                           uint32_t first_layer, uint32_t count,
                                           const void* const* devices, const uint64_t* row_pitches,
                                           void* stream) {
  return guarded([&] {
    require_pointer(devices, "devices");
    producer_of(producer).copy_layers_device(ticket, first_layer, count, devices, row_pitches,
                                             stream);
    return HS_OK;
  });
}

HS_API hs_status hs_producer_flush(hs_producer* producer) {
  return guarded([&] { return producer_of(producer).flush(); });
}

}  // extern "C"
