#include "bench/payload.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_process.h"
#include "bench/hsring_endpoints.h"
#include "common/clock.h"

namespace hsring::bench {

namespace {

// Faults in the pages now, so that the measurement does not time first touches.
void touch_pages(std::byte* begin, size_t bytes, bool write) {
  for (size_t offset = 0; offset < bytes; offset += 4096) {
    auto* p = reinterpret_cast<volatile std::byte*>(begin + offset);
    if (write) {
      *p = std::byte{0};
    } else {
      (void)*p;
    }
  }
}

// The captured-layer bytes of every slot: what the payload test moves.
void touch_ring_layers(Ring& ring, bool write) {
  for (uint32_t s = 0; s < ring.slot_count(); ++s) {
    for (uint32_t k = 0; k < ring.shape().num_layers; ++k) {
      touch_pages(ring.layer_region(s, k), ring.layout().slot.layer_bytes, write);
    }
  }
}

// Removes a ring made by the parent when the scope ends, error or not.
struct RingRemover {
  std::string name;
  ~RingRemover() { Ring::remove(name); }
};

void produce_payloads(const std::string& ring_name, uint32_t slots, Child& child) {
  HsringProducer producer(ring_name, 0, WaitMode::kBlocking);
  Ring& ring = producer.ring();
  const uint64_t layer_bytes = ring.layout().slot.layer_bytes;
  const uint32_t layers = ring.shape().num_layers;
  std::vector<std::byte> source(layer_bytes * layers);
  for (size_t i = 0; i < source.size(); i += 64) source[i] = std::byte(i >> 6);
  touch_ring_layers(ring, /*write=*/true);  // slots are FREE: nobody reads them yet
  child.wait_for_start();
  for (uint64_t id = 0; id < slots; ++id) {
    SlotClaim claim = producer.begin(id);
    for (uint32_t k = 0; k < layers; ++k) {
      std::memcpy(ring.layer_region(claim.index, k), source.data() + k * layer_bytes, layer_bytes);
    }
    std::memcpy(ring.layer_region(claim.index, 0), &id, sizeof id);  // lets the reader check
    producer.publish(claim, id);
  }
  child.report().end_ns.store(monotonic_ns(), std::memory_order_relaxed);
}

void consume_payloads(const std::string& ring_name, uint32_t slots, Child& child) {
  HsringConsumer consumer(ring_name, 0, WaitMode::kBlocking);
  Ring& ring = consumer.ring();
  const uint64_t layer_bytes = ring.layout().slot.layer_bytes;
  const uint32_t layers = ring.shape().num_layers;
  std::vector<std::byte> destination(layer_bytes * layers);  // zero-filled: pages touched
  touch_ring_layers(ring, /*write=*/false);
  child.wait_for_start();
  uint64_t checksum = 0;
  for (uint32_t i = 0; i < slots; ++i) {
    SlotClaim claim = consumer.acquire();
    for (uint32_t k = 0; k < layers; ++k) {
      std::memcpy(destination.data() + k * layer_bytes, ring.layer_region(claim.index, k),
                  layer_bytes);
    }
    const uint64_t expected = consumer.batch_id(claim);
    consumer.release(claim);
    uint64_t stamped = 0;
    std::memcpy(&stamped, destination.data(), sizeof stamped);
    if (stamped != expected)
      throw std::runtime_error("payload of batch " + std::to_string(expected) + " is torn");
    checksum += stamped;
  }
  child.report().end_ns.store(monotonic_ns(), std::memory_order_relaxed);
  child.report().checksum.store(checksum, std::memory_order_relaxed);
}

// GB/s (1e9 bytes) of `count` single-thread memcpys of `bytes` between two warm buffers.
double measure_memcpy(uint64_t bytes, uint32_t count) {
  std::vector<std::byte> source(bytes, std::byte{1});
  std::vector<std::byte> destination(bytes);
  const uint64_t start_ns = monotonic_ns();
  for (uint32_t i = 0; i < count; ++i) {
    std::memcpy(destination.data(), source.data(), bytes);
    // Keeps the compiler from merging or dropping copies whose result nobody reads.
    asm volatile("" : : "r"(destination.data()) : "memory");
  }
  return double(bytes) * count / double(monotonic_ns() - start_ns);
}

}  // namespace

PayloadResult measure_payload(uint32_t slots, uint32_t max_tokens) {
  RingShape shape;
  shape.slot_count = kPayloadRingSlots;
  shape.max_tokens = max_tokens;
  shape.hidden_size = kPayloadHidden;
  shape.num_layers = kPayloadLayers;
  shape.dtype = DType::kBF16;
  shape.num_targets = 1;
  shape.num_drafters = 1;
  shape.hs_min_ready = 1;
  shape.ledger_capacity = slots;
  RingRemover ring{register_shm_name("payload")};
  const uint64_t slot_bytes =
      Ring::create(ring.name, shape)->layout().slot.layer_bytes * kPayloadLayers;

  ChildGroup group;
  group.spawn([&](Child& child) { produce_payloads(ring.name, slots, child); });
  group.spawn([&](Child& child) { consume_payloads(ring.name, slots, child); });
  const uint64_t start_ns = group.start(kSetupLimit);
  group.wait_all(kRunLimit);
  if (group.report(1).checksum.load() != uint64_t(slots) * (slots - 1) / 2) {
    throw std::runtime_error("payload consumer saw other batches than were sent");
  }
  PayloadResult result;
  result.slot_bytes = slot_bytes;
  result.ring_gbps = double(slot_bytes) * slots / double(group.latest_end_ns() - start_ns);
  result.memcpy_gbps = measure_memcpy(slot_bytes, slots);
  return result;
}

}  // namespace hsring::bench
