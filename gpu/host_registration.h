// Pinning host memory for DMA with cudaHostRegister, for the lifetime of an object. Every
// GPU worker pins the ring's slot payloads at attach (docs/ring-protocol.md: a fixed array of slots
// in host memory that every process pins), so its copies run at PCIe speed straight
// between the GPU and the slots, with no staging buffer and no host memcpy.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace hsring {
class Ring;
}

namespace hsring::gpu {

class HostRegistration {
 public:
  // Checks RLIMIT_MEMLOCK first, then registers [base, base + bytes) as portable pinned
  // memory. Throws Error(kCuda) (memlock, or CUDA) with a message naming `what`.
  static std::unique_ptr<HostRegistration> pin(void* base, size_t bytes, const std::string& what);
  ~HostRegistration();  // cudaHostUnregister
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;

  void* base() const { return base_; }
  size_t bytes() const { return bytes_; }
  double seconds() const { return seconds_; }  // how long cudaHostRegister took

 private:
  HostRegistration(void* base, size_t bytes, double seconds)
      : base_(base), bytes_(bytes), seconds_(seconds) {}
  void* base_;
  size_t bytes_;
  double seconds_;
};

// The bytes of `ring` that GPU workers pin: every slot's payload, nothing of the headers.
size_t ring_payload_bytes(const Ring& ring);

// Pins the ring's slot payloads on the current device and logs how long it took.
std::unique_ptr<HostRegistration> pin_ring_payload(const Ring& ring);

}  // namespace hsring::gpu
